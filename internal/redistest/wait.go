package redistest

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// pollEvery is how often the wait helpers ask the servers again.
const pollEvery = 20 * time.Millisecond

// poll calls check until it returns "" and returns nil, or until ctx is
// done and returns an error with check's last answer: why it is not there.
func poll(ctx context.Context, check func() string) error {
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	for {
		why := check()
		if why == "" {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: %s", context.Cause(ctx), why)
		case <-tick.C:
		}
	}
}

// roleOf returns what s answers to ROLE ("master", "slave", "sentinel"),
// or "" when it does not answer.
func roleOf(ctx context.Context, s *Server) string {
	var role string
	_ = withInfoClient(s, func(rc *redis.Client) error {
		reply, err := rc.Do(ctx, "ROLE").Slice()
		if err == nil && len(reply) > 0 {
			role, _ = reply[0].(string)
		}
		return err
	})
	return role
}

// replication returns the fields of INFO replication on s.
func replication(ctx context.Context, s *Server) (info string, err error) {
	err = withInfoClient(s, func(rc *redis.Client) error {
		info, err = rc.Info(ctx, "replication").Result()
		return err
	})
	return info, err
}

// waitSynced waits until every running replica among nodes is linked to
// its master and has processed all that its master had written when
// waitSynced was called (or, for a master that was not one then, when
// waitSynced first saw it).
func waitSynced(ctx context.Context, nodes []*Server) error {
	targets := map[string]int64{} // master address -> offset to reach
	for _, s := range nodes {
		if !s.Running() {
			continue
		}
		info, err := replication(ctx, s)
		if err != nil {
			return fmt.Errorf("%s: INFO replication: %w", s.Addr(), err)
		}
		if infoField(info, "role") == "master" {
			targets[s.Addr()], _ = strconv.ParseInt(infoField(info, "master_repl_offset"), 10, 64)
		}
	}
	target := func(master string) (int64, error) {
		if off, ok := targets[master]; ok {
			return off, nil
		}
		for _, s := range nodes {
			if s.Addr() != master {
				continue
			}
			info, err := replication(ctx, s)
			if err != nil {
				return 0, err
			}
			off, err := strconv.ParseInt(infoField(info, "master_repl_offset"), 10, 64)
			if err == nil {
				targets[master] = off
			}
			return off, err
		}
		return 0, fmt.Errorf("master %s is not one of the nodes", master)
	}
	return poll(ctx, func() string {
		for _, s := range nodes {
			if !s.Running() {
				continue
			}
			info, err := replication(ctx, s)
			if err != nil {
				return fmt.Sprintf("%s: INFO replication: %v", s.Addr(), err)
			}
			if infoField(info, "role") != "slave" {
				continue
			}
			master := net.JoinHostPort(infoField(info, "master_host"), infoField(info, "master_port"))
			if link := infoField(info, "master_link_status"); link != "up" {
				return fmt.Sprintf("replica %s: link to %s is %s", s.Addr(), master, link)
			}
			want, err := target(master)
			if err != nil {
				return fmt.Sprintf("replica %s: master %s: %v", s.Addr(), master, err)
			}
			got, _ := strconv.ParseInt(infoField(info, "slave_repl_offset"), 10, 64)
			if got < want {
				return fmt.Sprintf("replica %s at offset %d of %s's %d", s.Addr(), got, master, want)
			}
		}
		return ""
	})
}
