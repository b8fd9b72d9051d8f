// Asynq runs two asynq servers on one queue, each with its own Redis
// clients and guard.Locker as separate processes would have, and shows what
// asynqguard does with duplicate tasks: identical tasks run one at a time
// across both servers, different ones in parallel, and a duplicate that
// finds its key busy is retried soon without spending one of its retries.
//
//	go run ./examples/asynq                                            # starts a local redis-server
//	REDIS_URL=redis://127.0.0.1:6379/15 go run ./examples/asynq        # a real one
//	go run ./examples/asynq -trace                                     # and print the spans
package main

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/hibiken/asynq"
	"github.com/jobguard/jobguard/asynqguard"
	"github.com/jobguard/jobguard/examples/internal/exampleenv"
	"github.com/jobguard/jobguard/guard"
	"github.com/redis/go-redis/v9"
)

const taskType = "email:welcome"

func main() { exampleenv.Main("asynq example", run) }

// run tells the story on out; opts go to every server's Locker.
func run(ctx context.Context, out io.Writer, opts ...guard.Option) error {
	rdbOpts, stopRedis, err := connect(ctx)
	if err != nil {
		return err
	}
	defer stopRedis()
	redisOpt := asynq.RedisClientOpt{Addr: rdbOpts.Addr, Username: rdbOpts.Username, Password: rdbOpts.Password, DB: rdbOpts.DB, TLSConfig: rdbOpts.TLSConfig}
	queue := "asynqguard-example-" + strings.ToLower(rand.Text()[:6]) // never mixes with an earlier run's tasks

	client := asynq.NewClient(redisOpt)
	defer client.Close()
	inspector := asynq.NewInspector(redisOpt)
	defer inspector.Close()
	defer func() { _ = inspector.DeleteQueue(queue, true) }()

	p := exampleenv.NewPrinter(out)
	st := &story{runs: map[string]int{}, running: map[int]int{}}

	p.Say("enqueue", "3 welcome emails for user 42 (duplicates) and 1 for user 7")
	var ids []string
	for _, user := range []int{42, 42, 7, 42} {
		payload, _ := json.Marshal(map[string]int{"user": user})
		info, err := client.Enqueue(asynq.NewTask(taskType, payload), asynq.Queue(queue), asynq.MaxRetry(3))
		if err != nil {
			return fmt.Errorf("enqueue: %w", err)
		}
		ids = append(ids, info.ID)
	}

	for _, name := range []string{"server-A", "server-B"} {
		stop, err := startServer(name, rdbOpts, redisOpt, queue, p, st, opts...)
		if err != nil {
			return err
		}
		defer stop()
	}

	deadline := time.Now().Add(30 * time.Second)
	for !st.finished(len(ids)) {
		if time.Now().After(deadline) {
			return errors.New("the tasks were not all processed within 30s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	qi, err := inspector.GetQueueInfo(queue)
	if err != nil {
		return fmt.Errorf("queue info: %w", err)
	}

	st.mu.Lock()
	defer st.mu.Unlock()
	p.Say("summary", "%d tasks enqueued, %d runs: every task ran exactly once", len(ids), st.total())
	beside := "ran beside them"
	if st.maxUsers < 2 {
		beside = "did not happen to run beside them"
	}
	p.Say("summary", "user 42's emails never ran at the same time (%d overlaps); user 7's %s", st.overlaps, beside)
	p.Say("summary", "%d busy retries, retries spent: %d; asynq counted %d failures", st.busy, st.spent, qi.Failed)
	if st.total() != len(ids) || st.overlaps != 0 || st.spent != 0 || qi.Failed != 0 {
		return errors.New("the guard did not hold")
	}
	return nil
}

// startServer starts one asynq server with its own guard.Locker, made with
// lockerOpts, and returns the function that stops both.
func startServer(name string, rdbOpts *redis.Options, redisOpt asynq.RedisClientOpt, queue string, p *exampleenv.Printer, st *story, lockerOpts ...guard.Option) (stop func(), err error) {
	rdb := redis.NewClient(rdbOpts)
	locker, err := guard.New(rdb, lockerOpts...)
	if err != nil {
		rdb.Close()
		return nil, err
	}
	srv := asynq.NewServer(redisOpt, asynq.Config{
		Concurrency: 2,
		Queues:      map[string]int{queue: 1},
		// The two lines asynqguard asks for: a busy key is no failure and
		// is retried when the holder's lease would end, 5.5s at most.
		IsFailure:      asynqguard.IsFailure,
		RetryDelayFunc: asynqguard.RetryDelay,
		// Asynq moves due retries every 5s by default; faster for the story.
		DelayedTaskCheckInterval: 200 * time.Millisecond,
		TaskCheckInterval:        100 * time.Millisecond,
		ShutdownTimeout:          3 * time.Second,
		ErrorHandler: asynq.ErrorHandlerFunc(func(ctx context.Context, t *asynq.Task, err error) {
			if errors.Is(err, asynqguard.ErrBusy) {
				n, _ := asynq.GetRetryCount(ctx)
				st.mu.Lock()
				st.busy++
				st.mu.Unlock()
				p.Say(name, "user %d is busy elsewhere: retry soon (task %s, retry count stays %d)", user(t), short(ctx), n)
				return
			}
			p.Say(name, "task %s failed: %v", short(ctx), err)
		}),
		Logger:   quietLogger{},
		LogLevel: asynq.WarnLevel,
	})
	mux := asynq.NewServeMux()
	mux.Use(asynqguard.Middleware(locker))
	mux.HandleFunc(taskType, func(ctx context.Context, t *asynq.Task) error {
		u := user(t)
		n, _ := asynq.GetRetryCount(ctx)
		st.enter(ctx, u, n)
		defer st.leave(u)
		p.Say(name, "sends the welcome email to user %d (task %s, retry count %d)", u, short(ctx), n)
		select {
		case <-time.After(time.Second): // the SMTP call
		case <-ctx.Done():
			return context.Cause(ctx)
		}
		return nil
	})
	if err := srv.Start(mux); err != nil {
		locker.Close()
		rdb.Close()
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return func() {
		srv.Shutdown()
		locker.Close()
		rdb.Close()
	}, nil
}

// story is what the handlers saw.
type story struct {
	mu       sync.Mutex
	runs     map[string]int // task id -> runs
	running  map[int]int    // user -> handlers running
	overlaps int            // runs that started while one for the same user ran
	maxUsers int            // most users served at once
	busy     int            // busy retries
	spent    int            // sum of retry counts the handlers saw
	done     int            // runs finished
}

func (s *story) enter(ctx context.Context, user, retried int) {
	id, _ := asynq.GetTaskID(ctx)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.running[user] > 0 {
		s.overlaps++
	}
	s.running[user]++
	s.maxUsers = max(s.maxUsers, s.busyUsers())
	s.runs[id]++
	s.spent += retried
}

// busyUsers returns how many users have a handler running; s.mu must be held.
func (s *story) busyUsers() int {
	n := 0
	for _, r := range s.running {
		if r > 0 {
			n++
		}
	}
	return n
}

func (s *story) leave(user int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.running[user]--
	s.done++
}

func (s *story) finished(n int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.done >= n
}

// total returns the number of runs; s.mu must be held.
func (s *story) total() int {
	n := 0
	for _, r := range s.runs {
		n += r
	}
	return n
}

func user(t *asynq.Task) int {
	var p struct{ User int }
	_ = json.Unmarshal(t.Payload(), &p)
	return p.User
}

// short returns the first 8 characters of the task's id.
func short(ctx context.Context) string {
	id, _ := asynq.GetTaskID(ctx)
	return id[:min(8, len(id))]
}

// quietLogger passes asynq's warnings and errors to stderr.
type quietLogger struct{}

func (quietLogger) Debug(...any)      {}
func (quietLogger) Info(...any)       {}
func (quietLogger) Warn(args ...any)  { fmt.Fprintln(os.Stderr, append([]any{"asynq:"}, args...)...) }
func (quietLogger) Error(args ...any) { fmt.Fprintln(os.Stderr, append([]any{"asynq:"}, args...)...) }
func (quietLogger) Fatal(args ...any) { fmt.Fprintln(os.Stderr, append([]any{"asynq:"}, args...)...) }
