package measure

import "runtime"

// Allocs is a reading of the heap allocations this process has made.
type Allocs struct {
	Count uint64 // runtime.MemStats.Mallocs
	Bytes uint64 // runtime.MemStats.TotalAlloc
}

// ReadAllocs returns the heap allocations made so far by every goroutine of
// this process. It stops the world for a moment (runtime.ReadMemStats):
// read it at the edges of a window, not inside.
func ReadAllocs() Allocs {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return Allocs{Count: ms.Mallocs, Bytes: ms.TotalAlloc}
}

// Sub returns the allocations made between before and a.
func (a Allocs) Sub(before Allocs) Allocs {
	return Allocs{Count: a.Count - before.Count, Bytes: a.Bytes - before.Bytes}
}
