// Package results is the JSON schema of one benchmark run: what cmd/bench
// writes and cmd/charts and cmd/report read. Times are in microseconds
// (suffix _us) unless the name says otherwise; durations in the sizes are
// nanoseconds (suffix _ns).
package results

import (
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/jobguard/jobguard/bench/internal/measure"
)

// Run is everything one run of cmd/bench measured.
type Run struct {
	Machine    Machine      `json:"machine"`
	Command    string       `json:"command"`
	Sizes      Sizes        `json:"sizes"`
	ElapsedSec float64      `json:"elapsed_sec"`
	Ping       Ping         `json:"ping"`
	Sequential []Sequential `json:"sequential"`
	Ceiling    Throughput   `json:"ceiling"` // SET+DEL, the throughput scenario's ceiling
	Throughput []Throughput `json:"throughput"`
	Handoff    []Handoff    `json:"handoff"`
	Renewal    []Renewal    `json:"renewal"`
	// Pinned, when present, is the second part of the same run: PING,
	// sequential and throughput again with the client process pinned to
	// one CPU (GOMAXPROCS 1) and each redis-server to another. Its own
	// Machine says where and when; it has no hand-off or renewal cases.
	Pinned *Run `json:"pinned,omitempty"`
}

// Machine describes where and with what the run was made.
type Machine struct {
	Date         string            `json:"date"` // RFC 3339, UTC
	CPUModel     string            `json:"cpu_model"`
	CPUs         int               `json:"cpus"`
	Kernel       string            `json:"kernel"`
	GoVersion    string            `json:"go_version"`
	GOMAXPROCS   int               `json:"gomaxprocs"`
	RedisVersion string            `json:"redis_version"`
	Libraries    map[string]string `json:"libraries"`  // module path → version
	Guard        string            `json:"guard"`      // the repository commit guard was built from
	ClientCPU    int               `json:"client_cpu"` // -1: not pinned
	ServerCPU    int               `json:"server_cpu"` // -1: not pinned
	Pinning      string            `json:"pinning"`
	// OpContext is how each measured operation gets its context.
	OpContext string `json:"op_context"`
}

// Sizes are the counts and time limits the run used.
type Sizes struct {
	FloorPings       int             `json:"floor_pings"` // PINGs in each before/after floor sample
	PingCount        int             `json:"ping_count"`
	PingWindow       time.Duration   `json:"ping_window_ns"`
	SeqOps           int             `json:"seq_ops"`
	SeqWindow        time.Duration   `json:"seq_window_ns"`
	TPGoroutines     int             `json:"tp_goroutines"`
	TPOps            int             `json:"tp_ops"`
	TPWindow         time.Duration   `json:"tp_window_ns"`
	TPRounds         int             `json:"tp_rounds"`
	HandoffWaiters   []int           `json:"handoff_waiters"`
	HandoffHolds     []time.Duration `json:"handoff_holds_ns"`
	HandoffAcq       int             `json:"handoff_acquisitions"`
	HandoffWindow    time.Duration   `json:"handoff_window_ns"`
	RetryDelay       time.Duration   `json:"retry_delay_ns"` // redsync, redislock, raw polling
	TTL              time.Duration   `json:"ttl_ns"`         // lock TTL outside the renewal scenario
	RenewLocks       int             `json:"renew_locks"`
	RenewWindow      time.Duration   `json:"renew_window_ns"`
	RenewTTL         time.Duration   `json:"renew_ttl_ns"`
	RenewEvery       time.Duration   `json:"renew_every_ns"`
	PoolSize         int             `json:"pool_size"` // go-redis connections per client
	MaxAttempts      int             `json:"max_attempts"`
	OthersCoresLimit float64         `json:"others_cores_limit"`
	FloorDriftLimit  float64         `json:"floor_drift_limit"`
}

// Quality records how undisturbed a case was, attempt by attempt; the
// case's numbers come from the last attempt.
type Quality struct {
	Attempts  []Attempt `json:"attempts"`
	Disturbed bool      `json:"disturbed"` // the last attempt was disturbed too
}

// Attempt is one run of a case and the checks around it.
type Attempt struct {
	FloorBeforeUs float64 `json:"floor_before_us"` // p50 PING before the case
	FloorAfterUs  float64 `json:"floor_after_us"`  // p50 PING after it
	measure.Noise
	Seconds float64  `json:"seconds"`
	Reasons []string `json:"reasons,omitempty"` // why it counts as disturbed
}

// Ping is scenario 1: sequential PINGs on an idle server.
type Ping struct {
	Quality Quality         `json:"quality"`
	RTT     measure.Summary `json:"rtt"`
}

// Sequential is scenario 2: one goroutine, one key, acquire then release,
// with two PINGs timed after each operation as its floor; then as many
// operations again without the PINGs, whose cost is measured.
type Sequential struct {
	Lib      string          `json:"lib"`
	Quality  Quality         `json:"quality"`
	Op       measure.Summary `json:"op"`    // acquire + release
	Floor    measure.Summary `json:"floor"` // PING + PING, next to each op
	RatioP50 float64         `json:"ratio_p50"`
	RatioP99 float64         `json:"ratio_p99"`
	Errors   int64           `json:"errors"`
	CostOps  int64           `json:"cost_ops"` // operations of the cost window
	Cost     Cost            `json:"cost"`     // per operation of the cost window
}

// Command is one command's share of a case, from INFO commandstats.
type Command struct {
	Name        string  `json:"name"`
	Calls       int64   `json:"calls"`
	Usec        int64   `json:"usec"`
	UsecPerCall float64 `json:"usec_per_call"`
	CallsPerOp  float64 `json:"calls_per_op"`
	UsecPerOp   float64 `json:"usec_per_op"`
}

// Cost is what a case's operations cost, per operation (an acquisition
// with its release, or a SET with its DEL).
type Cost struct {
	ClientCPUUs    float64   `json:"client_cpu_us"`   // getrusage, whole client process
	ThreadSleeps   float64   `json:"thread_sleeps"`   // getrusage ru_nvcsw, whole client process
	Allocs         float64   `json:"allocs"`          // runtime.MemStats Mallocs, whole client process
	AllocBytes     float64   `json:"alloc_bytes"`     // runtime.MemStats TotalAlloc, whole client process
	ServerCPUUs    float64   `json:"server_cpu_us"`   // INFO used_cpu_sys+used_cpu_user
	ServerCalls    float64   `json:"server_calls"`    // commandstats calls, including those scripts run
	ClientCommands float64   `json:"client_commands"` // commands the client sent (go-redis hook)
	RoundTrips     float64   `json:"round_trips"`     // pipelines count once
	Commands       []Command `json:"commands"`        // per command, server side
}

// Throughput is scenario 3 (and its SET+DEL ceiling) for one library:
// goroutines on distinct keys, acquire then release, as fast as they can,
// in TPRounds rounds that alternate with the other libraries' rounds. Its
// figures are those of the median round by ops/s; the ratio is the median
// of each round's ratio to the ceiling's round of the same turn.
type Throughput struct {
	Lib            string            `json:"lib"`
	Goroutines     int               `json:"goroutines"`
	OpsPerSec      float64           `json:"ops_per_sec"`      // the median round's
	RatioToCeiling float64           `json:"ratio_to_ceiling"` // median over rounds
	Cost           Cost              `json:"cost"`             // the median round's
	Median         int               `json:"median_round"`     // index into Rounds
	Rounds         []ThroughputRound `json:"rounds"`
}

// ThroughputRound is one round of the throughput scenario: one case.
type ThroughputRound struct {
	Quality    Quality `json:"quality"`
	Ops        int64   `json:"ops"`
	Seconds    float64 `json:"seconds"`
	OpsPerSec  float64 `json:"ops_per_sec"`
	Ratio      float64 `json:"ratio_to_ceiling"` // to the ceiling's round of the same turn
	Cost       Cost    `json:"cost"`
	Errors     int64   `json:"errors"`
	FirstError string  `json:"first_error,omitempty"`
}

// Handoff is scenario 4: waiters goroutines on one key.
type Handoff struct {
	Lib          string          `json:"lib"`
	Quality      Quality         `json:"quality"`
	Waiters      int             `json:"waiters"`
	HoldMs       float64         `json:"hold_ms"`
	Seconds      float64         `json:"seconds"`
	Acquisitions int64           `json:"acquisitions"`
	Latency      measure.Summary `json:"latency"` // unlock call → another goroutine's lock return
	Cost         Cost            `json:"cost"`    // per acquisition
	MinPerWaiter int64           `json:"min_per_waiter"`
	MaxPerWaiter int64           `json:"max_per_waiter"`
	Fairness     float64         `json:"fairness"` // min / max acquisitions per goroutine
	Violations   int64           `json:"violations"`
	GaveUp       int64           `json:"gave_up"` // Lock returned an error inside the window
	Errors       int64           `json:"errors"`  // Unlock errors
	FirstError   string          `json:"first_error,omitempty"`
}

// Renewal is scenario 5: many locks held and kept alive.
type Renewal struct {
	Lib           string    `json:"lib"`
	Quality       Quality   `json:"quality"`
	Renews        bool      `json:"renews"` // false: the raw baseline, no renewal, no owner check
	Locks         int       `json:"locks"`
	TTLms         float64   `json:"ttl_ms"`
	AcquireSec    float64   `json:"acquire_sec"`
	Seconds       float64   `json:"seconds"`
	Goroutines    int       `json:"goroutines"` // added while holding, over the baseline
	ServerCalls   int64     `json:"server_calls"`
	ClientCmds    int64     `json:"client_commands"`
	RoundTrips    int64     `json:"round_trips"`
	ClientCPUSec  float64   `json:"client_cpu_sec"`
	ServerCPUSec  float64   `json:"server_cpu_sec"`
	HeapInuseMiB  float64   `json:"heap_inuse_mib"` // over the baseline, after a GC
	HeapPerLockB  float64   `json:"heap_per_lock_bytes"`
	StackInuseMiB float64   `json:"stack_inuse_mib"` // goroutine stacks, over the baseline
	Lost          int       `json:"lost"`
	Commands      []Command `json:"commands"`
}

// Write writes r to path as indented JSON.
func Write(path string, r Run) error {
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(data, '\n'), 0o644)
}

// Read reads a Run from path.
func Read(path string) (Run, error) {
	var r Run
	data, err := os.ReadFile(path)
	if err != nil {
		return r, err
	}
	if err := json.Unmarshal(data, &r); err != nil {
		return r, fmt.Errorf("results: %s: %w", path, err)
	}
	return r, nil
}
