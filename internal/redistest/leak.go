package redistest

import "go.uber.org/goleak"

// LeakOptions returns the goleak options that tests using these servers
// need:
//
//	goleak.VerifyTestMain(m, redistest.LeakOptions()...)
//
// When every dial of a go-redis pool fails, for example after Kill, go-redis
// starts a probe goroutine that redials once a second and notices only after
// its next sleep that the client was closed, which is later than goleak
// looks. LeakOptions ignores that goroutine and nothing else.
func LeakOptions() []goleak.Option {
	return []goleak.Option{
		goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial"),
	}
}
