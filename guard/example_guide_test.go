package guard_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/jobguard/jobguard/guard"
	"github.com/jobguard/jobguard/guard/observe"
)

// A busy key is ErrNotAcquired, and HeldFor says how long its holder's
// lease lasts at most unless renewed: when to try again.
func ExampleHeldFor() {
	client, stop := exampleClient()                //docs:hide
	defer stop()                                   //docs:hide
	ctx := context.Background()                    //docs:hide
	other, _ := guard.New(client)                  //docs:hide
	defer other.Close()                            //docs:hide
	lease, _ := other.Acquire(ctx, "billing-sync") //docs:hide
	defer lease.Release(ctx)                       //docs:hide
	locker, _ := guard.New(client)                 //docs:hide
	defer locker.Close()                           //docs:hide
	// Another instance holds "billing-sync".
	_, err := locker.Acquire(ctx, "billing-sync", guard.Wait(0))
	if errors.Is(err, guard.ErrNotAcquired) {
		left, _ := guard.HeldFor(err) // at most this long, unless its holder renews
		fmt.Println("busy, for the TTL at most:", left <= 30*time.Second)
	} else if err != nil {
		log.Fatal(err) // not contention: Redis unreachable, ctx done, ...
	}
	// Output: busy, for the TTL at most: true
}

// Options are checked by New: one that does not fit is an error matching
// ErrInvalid, at startup, never a surprise at run time.
func ExampleNew_options() {
	client, stop := exampleClient() //docs:hide
	defer stop()                    //docs:hide
	locker, err := guard.New(client,
		guard.WithTTL(10*time.Second),       // a crashed holder blocks its keys 10s at most
		guard.WithIdentity("worker-1/4242"), // who holds, for guardctl
	)
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()

	// A renewal every 9s, with its timeout and the stop grace, cannot fit in 10s.
	_, err = guard.New(client, guard.WithTTL(10*time.Second), guard.WithRenewInterval(9*time.Second))
	fmt.Println("refused:", errors.Is(err, guard.ErrInvalid))
	// Output: refused: true
}

// MinHold keeps the key for 10 minutes after the run started, however soon
// the job returns: an instance whose clock is a few seconds behind finds it
// still held and skips the run.
func ExampleMinHold() {
	client, stop := exampleClient() //docs:hide
	defer stop()                    //docs:hide
	a, _ := guard.New(client)       //docs:hide
	defer a.Close()                 //docs:hide
	b, _ := guard.New(client)       //docs:hide
	defer b.Close()                 //docs:hide
	// a and b are the Lockers of two instances of the fleet.
	ctx := context.Background()
	err := a.WithLock(ctx, "billing-sync", func(ctx context.Context) error {
		return nil // a job that takes a millisecond
	}, guard.Wait(0), guard.MinHold(10*time.Minute))
	fmt.Println("ran:", err == nil)

	err = b.WithLock(ctx, "billing-sync", func(ctx context.Context) error {
		return nil
	}, guard.Wait(0), guard.MinHold(10*time.Minute))
	left, _ := guard.HeldFor(err)
	fmt.Println("skipped:", errors.Is(err, guard.ErrNotAcquired), "held for minutes more:", left > 9*time.Minute)
	// Output:
	// ran: true
	// skipped: true held for minutes more: true
}

// Permits(2): two holders at once, fleet-wide; a third finds the key busy.
func ExampleLocker_WithLock_permits() {
	client, stop := exampleClient() //docs:hide
	defer stop()                    //docs:hide
	locker, _ := guard.New(client)  //docs:hide
	defer locker.Close()            //docs:hide
	ctx := context.Background()
	first, _ := locker.Acquire(ctx, "partner-api", guard.Permits(2))
	defer first.Release(ctx)
	second, _ := locker.Acquire(ctx, "partner-api", guard.Permits(2))
	defer second.Release(ctx)

	err := locker.WithLock(ctx, "partner-api", func(ctx context.Context) error {
		return nil // call the partner; stop when ctx is done
	}, guard.Permits(2), guard.Wait(0))
	fmt.Println("third call busy:", errors.Is(err, guard.ErrNotAcquired))
	fmt.Println("each permit has its own token:", first.Token() != second.Token())
	// Output:
	// third call busy: true
	// each permit has its own token: true
}

// phasePrinter is an Observer that prints the phases of each lock operation.
type phasePrinter struct{}

func (pp phasePrinter) Begin(ctx context.Context, p observe.Phase, info observe.Info) context.Context {
	fmt.Println("begin", pp.name(p), info.Name)
	return ctx
}

func (pp phasePrinter) End(_ context.Context, p observe.Phase, info observe.Info) {
	if info.Result == "" {
		fmt.Println("end", pp.name(p), info.Name)
		return
	}
	fmt.Println("end", pp.name(p), info.Name, info.Result)
}

func (phasePrinter) Event(context.Context, observe.Event, observe.Info) {}

// name is how the printer calls phase p.
func (phasePrinter) name(p observe.Phase) string {
	switch p {
	case observe.Run:
		return "run"
	case observe.Acquire:
		return "acquire"
	default:
		return "release"
	}
}

// An Observer of your own feeds another system: it sees every phase of a
// lock operation (and point events: round trips, renewals, losses).
func ExampleWithObserver() {
	client, stop := exampleClient() //docs:hide
	defer stop()                    //docs:hide
	locker, err := guard.New(client, guard.WithObserver(phasePrinter{}))
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()
	_ = locker.WithLock(context.Background(), "report-42", func(context.Context) error {
		return nil
	}, guard.Name("report"))
	// Output:
	// begin run report
	// begin acquire report
	// end acquire report acquired
	// begin release report
	// end release report
	// end run report released
}
