// Quorum runs Redlock (guard.NewQuorum) over three independent masters and
// shows what a majority gives: a job runs on one instance at a time, the
// lock and its fencing tokens survive the loss of one master, and a job
// goes on being renewed while a majority answers.
//
//	go run ./examples/quorum                          # three embedded servers
//	REDIS_URLS=redis://127.0.0.1:7001,redis://127.0.0.1:7002,redis://127.0.0.1:7003 go run ./examples/quorum
//
// With REDIS_URLS the example cannot stop one of your masters: it closes
// its own connections to the first one instead, as a partition would.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/jobguard/jobguard/examples/internal/exampleenv"
	"github.com/jobguard/jobguard/guard"
)

const job = "ledger-close"

// fenceTTL lets the fencing counters expire a minute after the story last
// acquires, so a run against your servers leaves nothing behind for good.
var fenceTTL = guard.FenceTTL(time.Minute)

func main() {
	// go-redis logs every failed dial to the master this story stops.
	redis.SetLogger(quiet{})
	exampleenv.Main("quorum", run)
}

type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

// masters are three independent Redis servers and a way to lose the first.
type masters struct {
	urls []string
	lose func() // the first master goes away
	stop func()
}

func startMasters() (*masters, error) {
	if env := os.Getenv("REDIS_URLS"); env != "" {
		urls := strings.Split(env, ",")
		if len(urls) != 3 {
			return nil, fmt.Errorf("REDIS_URLS names %d servers; this example wants 3", len(urls))
		}
		return &masters{urls: urls, lose: func() {}, stop: func() {}}, nil
	}
	var servers []*miniredis.Miniredis
	stop := func() {
		for _, s := range servers {
			s.Close()
		}
	}
	for range 3 {
		s, err := miniredis.Run()
		if err != nil {
			stop()
			return nil, err
		}
		servers = append(servers, s)
	}
	m := &masters{stop: stop, lose: servers[0].Close}
	for _, s := range servers {
		m.urls = append(m.urls, "redis://"+s.Addr())
	}
	return m, nil
}

// instance is one process of the fleet: its own clients and Locker.
type instance struct {
	name    string
	clients []*redis.Client
	locker  *guard.Locker
}

func newInstance(name string, urls []string, opts []guard.Option) (*instance, error) {
	in := &instance{name: name}
	var universal []redis.UniversalClient
	for _, u := range urls {
		o, err := redis.ParseURL(u)
		if err != nil {
			in.close()
			return nil, err
		}
		o.DialTimeout, o.ReadTimeout, o.MaxRetries = 200*time.Millisecond, 200*time.Millisecond, -1
		c := redis.NewClient(o)
		in.clients = append(in.clients, c)
		universal = append(universal, c)
	}
	l, err := guard.NewQuorum(universal, append(opts, guard.WithTTL(2*time.Second))...)
	if err != nil {
		in.close()
		return nil, err
	}
	in.locker = l
	return in, nil
}

func (in *instance) close() {
	if in.locker != nil {
		in.locker.Close()
	}
	for _, c := range in.clients {
		c.Close()
	}
}

func run(ctx context.Context, out io.Writer, opts ...guard.Option) error {
	m, err := startMasters()
	if err != nil {
		return err
	}
	defer m.stop()
	p := exampleenv.NewPrinter(out)
	a, err := newInstance("instance-1", m.urls, opts)
	if err != nil {
		return err
	}
	defer a.close()
	b, err := newInstance("instance-2", m.urls, opts)
	if err != nil {
		return err
	}
	defer b.close()

	lease, err := a.locker.Acquire(ctx, job, fenceTTL)
	if err != nil {
		return err
	}
	first := lease.Token()
	p.Say(a.name, "holds %s on a majority of 3 masters (fencing token %d)", job, first)
	if _, err := b.locker.Acquire(ctx, job, guard.Wait(0), fenceTTL); !errors.Is(err, guard.ErrNotAcquired) {
		return fmt.Errorf("instance-2 was not turned away: %v", err)
	}
	p.Say(b.name, "is turned away: the key is busy")

	m.lose()
	if os.Getenv("REDIS_URLS") != "" {
		a.clients[0].Close() // your master stays up: instance-1 is cut off from it instead
	}
	p.Say("fleet", "--- master 1 is gone; two of three still answer")
	time.Sleep(3 * time.Second) // longer than the 2s TTL: the heartbeat renews on the majority
	if err := lease.Context().Err(); err != nil {
		return fmt.Errorf("instance-1 lost its lease with a majority up: %v", context.Cause(lease.Context()))
	}
	p.Say(a.name, "still holds it after 3s (TTL 2s): renewed on the two masters left")
	if _, err := b.locker.Acquire(ctx, job, guard.Wait(0), fenceTTL); !errors.Is(err, guard.ErrNotAcquired) {
		return fmt.Errorf("instance-2 got in while instance-1 held the key: %v", err)
	}
	p.Say(b.name, "is still turned away")
	if err := lease.Release(ctx); err != nil {
		return err
	}
	p.Say(a.name, "released it")
	next, err := b.locker.Acquire(ctx, job, guard.Wait(5*time.Second), fenceTTL)
	if err != nil {
		return err
	}
	defer next.Release(context.WithoutCancel(ctx))
	if next.Token() <= first {
		return fmt.Errorf("token went back: %d after %d", next.Token(), first)
	}
	p.Say(b.name, "holds %s, token %d > %d: tokens still only go up", job, next.Token(), first)
	return nil
}
