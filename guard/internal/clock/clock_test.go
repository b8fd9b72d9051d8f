package clock

import (
	"testing"
	"time"
)

// Real's timers fire, and one stopped before its time does not.
func TestRealTimers(t *testing.T) {
	c := Real{}
	start := c.Now()
	tm := c.NewTimer(10 * time.Millisecond)
	<-tm.C()
	if d := c.Now().Sub(start); d < 10*time.Millisecond {
		t.Fatalf("timer fired after %v", d)
	}
	fired := make(chan struct{})
	c.AfterFunc(time.Millisecond, func() { close(fired) })
	<-fired
	stopped := c.AfterFunc(time.Hour, func() { t.Error("a stopped AfterFunc ran") })
	stopped.Stop()
}
