package httpguard_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jobguard/jobguard/guard"
	"github.com/jobguard/jobguard/httpguard"
	"github.com/jobguard/jobguard/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// BenchmarkMiddleware serves a no-op handler through the middleware from
// 16 goroutines, without HTTP: each request with a fresh key, or a replay
// of one stored response. Beside ns/op it reports the CPU time this
// process (client-µs/op) and redis-server (server-µs/op) spent per
// request. What it costs beside a bare lock and no middleware, over HTTP,
// is measured by bench/cmd/httpbench.
func BenchmarkMiddleware(b *testing.B) {
	srv := redistest.Start(b)
	admin := srv.Client(b)
	l, err := guard.New(srv.Client(b, func(o *redis.Options) { o.PoolSize = 32 }))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = l.Close() })
	h := httpguard.Middleware(l, httpguard.SharedKeys())(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusCreated)
	}))
	serve := func(b *testing.B, key string) {
		r := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader(`{"sku":"book","qty":1}`))
		r.Header.Set("Idempotency-Key", key)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != http.StatusCreated {
			b.Fatalf("status %d: %s", w.Code, w.Body)
		}
	}
	var n atomic.Int64
	for _, bc := range []struct {
		name string
		key  func() string
	}{
		{"fresh", func() string { return "k" + strconv.FormatInt(n.Add(1), 10) }},
		{"replay", func() string { return "replayed" }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			serve(b, bc.key())
			b.ReportAllocs()
			b.SetParallelism(8)
			client, server := processCPU(), serverCPU(b, admin)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					serve(b, bc.key())
				}
			})
			b.ReportMetric(float64((processCPU()-client).Microseconds())/float64(b.N), "client-µs/op")
			b.ReportMetric(float64((serverCPU(b, admin)-server).Microseconds())/float64(b.N), "server-µs/op")
		})
	}
}

// processCPU returns the CPU time this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// serverCPU returns the CPU time redis-server has used (INFO cpu).
func serverCPU(b *testing.B, c *redis.Client) time.Duration {
	info, err := c.Info(context.Background(), "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	var total time.Duration
	for line := range strings.Lines(info) {
		name, value, _ := strings.Cut(strings.TrimSpace(line), ":")
		if name == "used_cpu_sys" || name == "used_cpu_user" {
			s, _ := strconv.ParseFloat(value, 64)
			total += time.Duration(s * float64(time.Second))
		}
	}
	return total
}
