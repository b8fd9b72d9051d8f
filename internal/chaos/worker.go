package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"time"

	"github.com/jobguard/jobguard/fence"
	"github.com/jobguard/jobguard/guard"
	"github.com/redis/go-redis/v9"
)

// Topologies a worker can take its leases on.
const (
	Standalone = "standalone" // one server (through the worker's own proxy)
	Sentinel   = "sentinel"   // a Sentinel set (redis.NewFailoverClient)
	Cluster    = "cluster"    // a Cluster (redis.NewClusterClient)
	Quorum     = "quorum"     // Redlock over independent masters (guard.NewQuorum)
)

// WorkerConfig is what a worker process is told, as JSON in its one
// argument.
type WorkerConfig struct {
	ID       string   `json:"id"`
	Topology string   `json:"topology"`
	Addrs    []string `json:"addrs"` // servers, proxies, Sentinels or Cluster nodes
	// MasterName is the Sentinel set's master name.
	MasterName string `json:"master_name,omitempty"`
	// Resource is the address of the resource Redis; DataKey the counter.
	Resource string        `json:"resource"`
	DataKey  string        `json:"data_key"`
	LockKey  string        `json:"lock_key"`
	TTL      time.Duration `json:"ttl"`
	// StopGrace is guard.WithStopGrace; 0 keeps guard's default.
	StopGrace time.Duration `json:"stop_grace"`
	// ReplicaAck is n of guard.WithReplicaAck, with a timeout of TTL/5.
	ReplicaAck int `json:"replica_ack"`
	// Hold is how long the job sleeps between its read and its write,
	// drawn for each lease from [Hold, HoldMax).
	Hold    time.Duration `json:"hold"`
	HoldMax time.Duration `json:"hold_max"`
	History string        `json:"history"`
	// WriteFenceOnly reads the counter without fencing, so that only the
	// write is fenced: a demonstration of what that misses.
	WriteFenceOnly bool `json:"write_fence_only,omitempty"`
	// StopFile ends the worker, after its current iteration, once it
	// exists; Deadline (Unix ns) ends it regardless.
	StopFile string `json:"stop_file"`
	Deadline int64  `json:"deadline"`
}

// RunWorker is the worker process: args[0] is its WorkerConfig as JSON. It
// prints "ready" once its history is open and "done" when it stops by
// itself, and returns an error only for a setup that cannot run.
func RunWorker(args []string) error {
	if len(args) != 1 {
		return fmt.Errorf("worker: want one JSON argument, got %d", len(args))
	}
	var cfg WorkerConfig
	if err := json.Unmarshal([]byte(args[0]), &cfg); err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	rec, err := NewRecorder(cfg.History, cfg.ID)
	if err != nil {
		return err
	}
	defer rec.Close()
	locker, closeClients, err := newLocker(cfg)
	if err != nil {
		return err
	}
	defer closeClients()
	rc := redis.NewClient(&redis.Options{Addr: cfg.Resource})
	defer rc.Close()
	res, err := NewResource(rc, cfg.DataKey)
	if err != nil {
		return err
	}
	if err := rec.Record(Event{Kind: EvStart}); err != nil {
		return err
	}
	fmt.Println("ready")
	w := &worker{cfg: cfg, rec: rec, locker: locker, res: res}
	deadline := time.Unix(0, cfg.Deadline)
	for lease := 1; time.Now().Before(deadline); lease++ {
		if _, err := os.Stat(cfg.StopFile); err == nil {
			break
		}
		w.iterate(lease)
	}
	if err := locker.Close(); err != nil {
		return fmt.Errorf("worker: Close: %w", err)
	}
	if err := rec.Record(Event{Kind: EvEnd}); err != nil {
		return err
	}
	fmt.Println("done")
	return nil
}

type worker struct {
	cfg    WorkerConfig
	rec    *Recorder
	locker *guard.Locker
	res    *Resource
}

// record writes e; a history that cannot be written makes the worker exit
// with an error, which the test sees as an unexpected death.
func (w *worker) record(e Event) {
	if err := w.rec.Record(e); err != nil {
		fmt.Fprintf(os.Stderr, "worker %s: history: %v\n", w.cfg.ID, err)
		os.Exit(3)
	}
}

// iterate takes one lease and runs one read-modify-write under it.
func (w *worker) iterate(lease int) {
	ttl := w.cfg.TTL
	actx, cancel := context.WithTimeout(context.Background(), 2*ttl)
	le, err := w.locker.Acquire(actx, w.cfg.LockKey, guard.Wait(2*ttl))
	cancel()
	if err != nil {
		w.record(Event{Kind: EvAcquireError, Lease: lease, Err: err.Error()})
		time.Sleep(ttl / 20)
		return
	}
	tok := le.Token()
	w.record(Event{Kind: EvAcquired, Lease: lease, Token: tok})
	job := le.Context()
	recorded := make(chan struct{})
	context.AfterFunc(job, func() {
		defer close(recorded)
		cause := context.Cause(job)
		w.record(Event{Kind: EvCtxDone, Lease: lease, Token: tok, Cause: cause.Error(), Lost: errors.Is(cause, guard.ErrLeaseLost)})
	})
	w.readModifyWrite(job, lease, tok)
	w.record(Event{Kind: EvRelease, Lease: lease, Token: tok})
	rctx, cancel := context.WithTimeout(context.Background(), ttl)
	err = le.Release(rctx)
	cancel()
	e := Event{Kind: EvReleased, Lease: lease, Token: tok}
	if err != nil {
		e.Err = err.Error()
	}
	w.record(e)
	select { // Release ends the context: its event is on its way
	case <-recorded:
	case <-time.After(ttl):
	}
}

// readModifyWrite reads the counter, sleeps Hold and writes it plus one,
// all fenced with tok, unless job ends first.
func (w *worker) readModifyWrite(job context.Context, lease int, tok int64) {
	op := func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(context.Background(), 2*time.Second)
	}
	if job.Err() != nil {
		w.record(Event{Kind: EvAbandon, Lease: lease, Token: tok})
		return
	}
	// The read's call time for the checker: a worker stopped after its
	// acquisition sends the read only when it resumes, perhaps after a
	// newer holder raised the fence, and an interval starting at the
	// acquisition would let a read that the fence wrongly accepted then
	// pass as an earlier one.
	w.record(Event{Kind: EvReadSent, Lease: lease, Token: tok})
	ctx, cancel := op()
	read := w.res.Read
	if w.cfg.WriteFenceOnly {
		read = func(ctx context.Context, _ int64) (int64, error) { return w.res.Value(ctx) }
	}
	v, err := read(ctx, tok)
	cancel()
	switch {
	case errors.Is(err, fence.ErrStale):
		w.record(Event{Kind: EvReadStale, Lease: lease, Token: tok, Err: err.Error(), Canceled: job.Err() != nil})
		return
	case err != nil:
		w.record(Event{Kind: EvReadError, Lease: lease, Token: tok, Err: err.Error()})
		return
	}
	w.record(Event{Kind: EvRead, Lease: lease, Token: tok, Read: i64(v)})
	d := w.cfg.Hold
	if w.cfg.HoldMax > d {
		d += rand.N(w.cfg.HoldMax - d)
	}
	t := time.NewTimer(d)
	select {
	case <-t.C:
	case <-job.Done():
		t.Stop()
	}
	if job.Err() != nil {
		w.record(Event{Kind: EvAbandon, Lease: lease, Token: tok, Read: i64(v)})
		return
	}
	w.record(Event{Kind: EvWrite, Lease: lease, Token: tok, Read: i64(v), Value: i64(v + 1)})
	ctx, cancel = op()
	err = w.res.Write(ctx, tok, v+1)
	cancel()
	e := Event{Kind: EvWriteOK, Lease: lease, Token: tok, Read: i64(v), Value: i64(v + 1), Canceled: job.Err() != nil}
	switch {
	case errors.Is(err, fence.ErrStale):
		e.Kind, e.Err = EvWriteStale, err.Error()
	case err != nil:
		e.Kind, e.Err = EvWriteError, err.Error()
	}
	w.record(e)
}

// newLocker returns the worker's Locker on its topology and a function
// that closes the clients.
func newLocker(cfg WorkerConfig) (*guard.Locker, func(), error) {
	opts := []guard.Option{guard.WithTTL(cfg.TTL), guard.WithIdentity(cfg.ID)}
	if cfg.StopGrace > 0 {
		opts = append(opts, guard.WithStopGrace(cfg.StopGrace))
	}
	if cfg.ReplicaAck > 0 {
		opts = append(opts, guard.WithReplicaAck(cfg.ReplicaAck, cfg.TTL/5))
	}
	const dial, rw = 300 * time.Millisecond, 500 * time.Millisecond
	var clients []redis.UniversalClient
	closeAll := func() {
		for _, c := range clients {
			_ = c.Close()
		}
	}
	var l *guard.Locker
	var err error
	switch cfg.Topology {
	case Standalone:
		clients = append(clients, redis.NewClient(&redis.Options{Addr: cfg.Addrs[0],
			DialTimeout: dial, ReadTimeout: rw, WriteTimeout: rw, MaxRetries: -1}))
		l, err = guard.New(clients[0], opts...)
	case Sentinel:
		clients = append(clients, redis.NewFailoverClient(&redis.FailoverOptions{
			MasterName: cfg.MasterName, SentinelAddrs: cfg.Addrs,
			DialTimeout: dial, ReadTimeout: rw, WriteTimeout: rw, MaxRetries: -1}))
		l, err = guard.New(clients[0], opts...)
	case Cluster:
		clients = append(clients, redis.NewClusterClient(&redis.ClusterOptions{Addrs: cfg.Addrs,
			DialTimeout: dial, ReadTimeout: rw, WriteTimeout: rw, MaxRetries: -1}))
		l, err = guard.New(clients[0], opts...)
	case Quorum:
		for _, a := range cfg.Addrs {
			clients = append(clients, redis.NewClient(&redis.Options{Addr: a,
				DialTimeout: dial, ReadTimeout: rw, WriteTimeout: rw, MaxRetries: -1}))
		}
		l, err = guard.NewQuorum(clients, opts...)
	default:
		err = fmt.Errorf("unknown topology %q", cfg.Topology)
	}
	if err != nil {
		closeAll()
		return nil, nil, fmt.Errorf("worker %s: %w", cfg.ID, err)
	}
	return l, closeAll, nil
}
