package scenario

import "context"

// OpContext says how the sequential and throughput scenarios give each
// operation its context, as a service gives each request one: every worker
// goroutine has a cancelable context of its own (a connection's, in
// net/http), and each operation runs under a cancelable child of it (a
// request's), canceled as soon as the operation returns. Creating it is part
// of each operation's measured cost, for every library and the ceiling alike.
const OpContext = "each worker goroutine under context.WithCancel of the run's context, each operation under context.WithCancel of its worker's, canceled when it returns"

// underOpContext runs op under a new cancelable child of worker and cancels
// it when op returns.
func underOpContext(worker context.Context, op func(context.Context) error) error {
	ctx, cancel := context.WithCancel(worker)
	defer cancel()
	return op(ctx)
}
