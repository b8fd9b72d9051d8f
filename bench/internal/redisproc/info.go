package redisproc

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Stats is a snapshot of the server's own accounting: CPU time and, per
// command, calls and microseconds from INFO commandstats. Commands that
// scripts run with redis.call are counted there too, as well as the EVALSHA
// that ran them.
type Stats struct {
	CPUSeconds float64            // used_cpu_sys + used_cpu_user
	Commands   map[string]Command // by command name, lower case ("evalsha", "set")
}

// Command is one INFO commandstats line.
type Command struct {
	Calls int64
	Usec  int64
}

// Snapshot reads INFO cpu and INFO commandstats over c.
func Snapshot(ctx context.Context, c *redis.Client) (Stats, error) {
	text, err := c.Info(ctx, "cpu", "commandstats").Result()
	if err != nil {
		return Stats{}, fmt.Errorf("redisproc: INFO: %w", err)
	}
	return parseInfo(text)
}

// Version returns the redis_version c's server reports, "?" when it
// cannot be read.
func Version(ctx context.Context, c *redis.Client) string {
	info, err := c.Info(ctx, "server").Result()
	if err != nil {
		return "?"
	}
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
			return v
		}
	}
	return "?"
}

func parseInfo(text string) (Stats, error) {
	st := Stats{Commands: map[string]Command{}}
	for line := range strings.Lines(text) {
		name, value, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		switch {
		case name == "used_cpu_sys" || name == "used_cpu_user":
			f, err := strconv.ParseFloat(value, 64)
			if err != nil {
				return st, fmt.Errorf("redisproc: %s: %w", name, err)
			}
			st.CPUSeconds += f
		case strings.HasPrefix(name, "cmdstat_"):
			cmd, err := parseCommand(value)
			if err != nil {
				return st, fmt.Errorf("redisproc: %s: %w", name, err)
			}
			st.Commands[strings.TrimPrefix(name, "cmdstat_")] = cmd
		}
	}
	return st, nil
}

// parseCommand parses "calls=1,usec=71,usec_per_call=71.00,...".
func parseCommand(value string) (Command, error) {
	var c Command
	for field := range strings.SplitSeq(value, ",") {
		k, v, _ := strings.Cut(field, "=")
		var err error
		switch k {
		case "calls":
			c.Calls, err = strconv.ParseInt(v, 10, 64)
		case "usec":
			c.Usec, err = strconv.ParseInt(v, 10, 64)
		}
		if err != nil {
			return c, err
		}
	}
	return c, nil
}

// Sub returns the change from before to s. Commands named in skip (the
// harness's own INFO and PING) are left out.
func (s Stats) Sub(before Stats, skip ...string) Stats {
	d := Stats{CPUSeconds: s.CPUSeconds - before.CPUSeconds, Commands: map[string]Command{}}
	for name, c := range s.Commands {
		if slices.Contains(skip, name) {
			continue
		}
		b := before.Commands[name]
		if c.Calls != b.Calls {
			d.Commands[name] = Command{Calls: c.Calls - b.Calls, Usec: c.Usec - b.Usec}
		}
	}
	return d
}

// Calls returns the total calls over every command.
func (s Stats) Calls() int64 {
	var n int64
	for _, c := range s.Commands {
		n += c.Calls
	}
	return n
}
