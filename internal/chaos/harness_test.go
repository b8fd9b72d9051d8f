package chaos_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jobguard/jobguard/guard"
	"github.com/jobguard/jobguard/internal/chaos"
	"github.com/jobguard/jobguard/internal/childproc"
	"github.com/jobguard/jobguard/internal/faultproxy"
	"github.com/jobguard/jobguard/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// profile is how much of each scenario a run does.
type profile struct {
	name     string
	each     int  // faults of each kind per scenario (a bound when duration is set)
	workers  int  // workers per group
	parallel bool // run the scenarios at once
	// duration, when set, is how long after start every scenario goes on
	// injecting faults from its schedule; the schedule then ends it, not
	// each. One end for all: a scenario whose topology took longer to
	// start stops with the others.
	duration time.Duration
	start    time.Time
}

// The slice runs one fault of each kind, every scenario at once, to fit
// in a minute; the full profile runs several of each, one scenario after
// another; the long one runs every scenario at once for -chaos.duration
// (make chaos-long), with each only a bound on its schedule's length, and
// two workers per group: enough to contend, and an hour of every scenario
// at once on two cores leaves the heartbeats their CPU.
var profiles = map[string]profile{
	"slice": {name: "slice", each: 1, workers: 3, parallel: true},
	"full":  {name: "full", each: 6, workers: 4},
	"long":  {name: "long", each: 5000, workers: 2, parallel: true},
}

// Timing shared by every scenario: leases of one second, told to stop
// 250ms before they could end; a job holds the counter for 0.2s to 1.8s
// between its read and its write, so that it sees renewals, often
// outlives a lease that is not renewed, and a fault usually hits a holder
// in the middle of its job.
const (
	ttl       = time.Second
	stopGrace = 250 * time.Millisecond
	hold      = 200 * time.Millisecond
	holdMax   = 1800 * time.Millisecond
	// window: what happens up to this long after a fault ends is counted
	// under it.
	window = 3 * ttl
)

// group is a set of workers that share a lock key and a counter. Its
// rows in the report carry suffix after each fault kind.
type group struct {
	name        string
	suffix      string
	replicaAck  int
	fencingOnly map[string]string // by fault kind without the suffix
	promises    map[string]string // by fault kind without the suffix; over the shared promises
	workers     []*workerProc
	killed      map[string]bool
	started     int
}

type workerProc struct {
	id      string
	child   *childproc.Child
	proxy   *faultproxy.Proxy // standalone only
	history string
	killed  bool
}

// run is one scenario's topology, workers and faults.
type run struct {
	t        *testing.T
	name     string
	topology string
	// lockAddr is the server standalone workers reach through a proxy
	// each; addrs are what the other topologies' workers connect to.
	lockAddr   string
	addrs      []string
	masterName string
	resource   *redistest.Server
	dir        string
	stopFile   string
	deadline   time.Time
	// end is when a long run's schedule stops (zero: when it runs out).
	end    time.Time
	groups []*group
	faults []chaos.Fault
}

func newRun(t *testing.T, p profile, name, topology string) *run {
	t.Helper()
	dir := t.TempDir()
	if *outFlag != "" { // keep the histories beside the report
		dir = filepath.Join(*outFlag, "histories", name)
		if err := os.RemoveAll(dir); err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	r := &run{
		t: t, name: name, topology: topology,
		resource: redistest.Start(t),
		dir:      dir,
		stopFile: filepath.Join(dir, "stop"),
		deadline: time.Now().Add(8 * time.Minute), // a bound; the stop file ends them
	}
	if p.duration > 0 {
		r.end = p.start.Add(p.duration)
		r.deadline = r.end.Add(5 * time.Minute)
	}
	return r
}

// over reports whether a long run's time is up: its scenario injects no
// more faults and finishes.
func (r *run) over() bool { return !r.end.IsZero() && time.Now().After(r.end) }

func (r *run) lockKey(g *group) string { return r.name + "-" + g.name }

// startWorkers starts n workers in g and waits until each is ready.
func (r *run) startWorkers(g *group, n int) []*workerProc {
	r.t.Helper()
	var ws []*workerProc
	for range n {
		ws = append(ws, r.launch(g))
	}
	for _, w := range ws {
		w.child.WaitLine(r.t, "ready", 30*time.Second)
	}
	return ws
}

// launch starts one worker of g without waiting for it.
func (r *run) launch(g *group) *workerProc {
	r.t.Helper()
	g.started++
	w := &workerProc{id: fmt.Sprintf("%s/%s/w%d", r.name, g.name, g.started)}
	w.history = filepath.Join(r.dir, fmt.Sprintf("%s-w%d.jsonl", g.name, g.started))
	cfg := chaos.WorkerConfig{
		ID: w.id, Topology: r.topology, Addrs: r.addrs, MasterName: r.masterName,
		Resource: r.resource.Addr(), DataKey: "chaos:{" + r.lockKey(g) + "}", LockKey: r.lockKey(g),
		TTL: ttl, StopGrace: stopGrace, ReplicaAck: g.replicaAck, Hold: hold, HoldMax: holdMax,
		History: w.history, StopFile: r.stopFile, Deadline: r.deadline.UnixNano(),
		WriteFenceOnly: *writeFenceOnlyFlag,
	}
	if r.topology == chaos.Standalone {
		w.proxy = faultproxy.New(r.t, r.lockAddr)
		cfg.Addrs = []string{w.proxy.Addr()}
	}
	b, err := json.Marshal(cfg)
	if err != nil {
		r.t.Fatal(err)
	}
	w.child = childproc.Start(r.t, "worker", string(b))
	g.workers = append(g.workers, w)
	return w
}

// kill SIGKILLs w, records that the schedule did, and starts a
// replacement.
func (r *run) kill(g *group, w *workerProc) {
	r.t.Helper()
	w.child.Kill(r.t)
	w.killed = true
	if g.killed == nil {
		g.killed = map[string]bool{}
	}
	g.killed[w.id] = true
	r.launch(g).child.WaitLine(r.t, "ready", 30*time.Second)
}

// holder returns the worker of g that has just taken its key: it asks
// the lock server (Inspect) until the holder's token changes, so that the
// fault hits a job at its start, with all its hold ahead of it. If the
// holder does not change within 5s it returns the current one, and it
// fails the test if no worker holds the key within that time.
func (r *run) holder(g *group, inspector *guard.Locker) *workerProc {
	r.t.Helper()
	var first int64 = -1
	var current *workerProc
	for range 250 {
		ctx, cancel := context.WithTimeout(r.t.Context(), time.Second)
		st, err := inspector.Inspect(ctx, r.lockKey(g))
		cancel()
		if err == nil && len(st.Holders) > 0 {
			h := st.Holders[0]
			if first == -1 {
				first = h.Token
			}
			for _, w := range g.workers {
				if w.id == h.Identity && !w.killed {
					current = w
					if h.Token != first {
						return w
					}
				}
			}
		} else if first == -1 {
			first = 0
		}
		time.Sleep(20 * time.Millisecond)
	}
	if current == nil {
		r.t.Fatalf("%s: no worker of %s holds %q", r.name, g.name, r.lockKey(g))
	}
	return current
}

// inject runs one fault: do injects it and returns the target's name;
// end (optional) lifts it after d, or waits until it is over. The fault
// ends when end returns.
func (r *run) inject(kind string, d time.Duration, do func() string, end func()) {
	r.t.Helper()
	f := chaos.Fault{Kind: kind, Start: time.Now().UnixNano()}
	f.Target = do()
	if end != nil {
		time.Sleep(d)
		end()
	}
	f.End = time.Now().UnixNano()
	r.t.Logf("%s: %s on %s for %v", r.name, kind, f.Target, time.Duration(f.End-f.Start).Round(time.Millisecond))
	r.faults = append(r.faults, f)
}

// finish stops the workers, waits for each to say it is done, and checks
// each group's histories.
func (r *run) finish() []*chaos.Result {
	r.t.Helper()
	r.waitRecovered()
	if err := os.WriteFile(r.stopFile, nil, 0o644); err != nil {
		r.t.Fatal(err)
	}
	for _, g := range r.groups {
		for _, w := range g.workers {
			if !w.killed {
				w.child.WaitLine(r.t, "done", 4*ttl+20*time.Second)
			}
		}
	}
	rc := r.resource.Client(r.t)
	var out []*chaos.Result
	for _, g := range r.groups {
		in := chaos.Group{
			Scenario:      r.name,
			Killed:        g.killed,
			FencingOnly:   map[string]string{},
			Window:        window,
			VisualizeDir:  visualizeDir(),
			UnfencedReads: *writeFenceOnlyFlag,
		}
		if len(r.groups) > 1 {
			in.Name = g.name
		}
		for k, why := range g.fencingOnly {
			in.FencingOnly[k+g.suffix] = why
		}
		in.Promises = map[string]string{}
		for _, ps := range []map[string]string{promises, g.promises} {
			for k, p := range ps {
				in.Promises[k+g.suffix] = p
			}
		}
		for _, f := range r.faults {
			f.Kind += g.suffix
			in.Faults = append(in.Faults, f)
		}
		var errs []string
		for _, w := range g.workers {
			h, err := chaos.ReadHistory(w.history)
			if err != nil {
				errs = append(errs, err.Error())
				continue
			}
			in.Histories = append(in.Histories, h)
		}
		res, err := chaos.NewResource(rc, "chaos:{"+r.lockKey(g)+"}")
		if err != nil {
			r.t.Fatal(err)
		}
		final, err := res.Value(r.t.Context())
		if err != nil {
			r.t.Fatalf("%s: read the counter: %v", r.name, err)
		}
		in.Final = final
		result := chaos.Check(in)
		for _, k := range result.Kinds {
			if k.Kind == chaos.NoFault {
				k.Kind += g.suffix
			}
		}
		result.Errors = append(errs, result.Errors...)
		for _, f := range result.Failures() {
			r.t.Errorf("%s", f)
		}
		for _, v := range result.Verdicts {
			r.t.Logf("%s%s: %s", r.name, g.suffix, v)
		}
		if result.Disagreement != "" {
			r.t.Logf("%s%s: the checkers disagree: %s", r.name, g.suffix, result.Disagreement)
		}
		for _, v := range result.Violations {
			r.t.Logf("violation (hand-written checker): %s", v)
		}
		for _, l := range result.Late {
			r.t.Logf("told late: %s", l)
		}
		out = append(out, result)
	}
	return out
}

// visualizeDir is where porcupine's visualization of a rejected history
// goes: the report's directory, or without -chaos.out one under the
// system's temporary directory that outlives the test.
func visualizeDir() string {
	if *outFlag != "" {
		return *outFlag
	}
	return filepath.Join(os.TempDir(), "jobguard-chaos")
}

// inspector returns a Locker on client for Inspect, closed with client
// when the test ends.
func inspector(t *testing.T, client redis.UniversalClient) *guard.Locker {
	t.Helper()
	l, err := guard.New(client, guard.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = l.Close()
		_ = client.Close()
	})
	return l
}

// fastOptions makes a test's own client give up on a dead server quickly.
func fastOptions(o *redis.Options) {
	o.DialTimeout = 300 * time.Millisecond
	o.ReadTimeout = 500 * time.Millisecond
	o.WriteTimeout = 500 * time.Millisecond
	o.MaxRetries = -1
}

// waitRecovered waits, up to 20s, until every group has a write accepted
// under a lease taken after the last fault ended, so that the last fault's
// recovery is in the histories (Check fails a fault without one).
func (r *run) waitRecovered() {
	r.t.Helper()
	if len(r.faults) == 0 {
		return
	}
	last := r.faults[len(r.faults)-1]
	for _, g := range r.groups {
		for i := 0; !r.recovered(g, last.End); i++ {
			if i == 100 {
				r.t.Logf("%s: no write of %s accepted within 20s of the last fault", r.name, g.name)
				return
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
}

// recovered reports whether a worker of g has recorded an accepted write
// under a lease it took after since.
func (r *run) recovered(g *group, since int64) bool {
	for _, w := range g.workers {
		b, err := os.ReadFile(w.history)
		if err != nil {
			continue
		}
		if i := bytes.LastIndexByte(b, '\n'); i >= 0 {
			b = b[:i+1] // the worker may be writing a line
		}
		evs, err := chaos.ParseHistory(b)
		if err != nil {
			continue
		}
		fresh := map[int]bool{}
		for _, e := range evs {
			switch {
			case e.Kind == chaos.EvAcquired && e.Wall > since:
				fresh[e.Lease] = true
			case e.Kind == chaos.EvWriteOK && fresh[e.Lease]:
				return true
			}
		}
	}
	return false
}
