package redistest

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// StartReplica starts a server, as Start does, that replicates master. It
// waits until the replica reports master_link_status:up and the master lists
// the replica as online, and fails the test with both logs if that takes
// longer than 10s. args are appended to the command line.
func StartReplica(t testing.TB, master *Server, args ...string) *Server {
	t.Helper()
	replicaArgs := append([]string{"--replicaof", "127.0.0.1", strconv.Itoa(master.Port())}, args...)
	r := Start(t, replicaArgs...)
	if err := waitReplicating(master, r); err != nil {
		t.Fatalf("redistest: replica %s of %s: %v\nreplica %s\nmaster %s",
			r.Addr(), master.Addr(), err, r.logTail(), master.logTail())
	}
	return r
}

// StartMasters starts n independent servers, as Start does.
func StartMasters(t testing.TB, n int) []*Server {
	t.Helper()
	servers := make([]*Server, n)
	for i := range servers {
		servers[i] = Start(t)
	}
	return servers
}

// waitReplicating polls INFO replication on both sides until the link is up.
func waitReplicating(master, replica *Server) error {
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	mc := infoClient(master.Addr())
	defer mc.Close()
	rc := infoClient(replica.Addr())
	defer rc.Close()

	// The master lists each replica as "slaveN:ip=...,port=P,state=online,...".
	online := fmt.Sprintf(",port=%d,state=online,", replica.Port())
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	var last string
	for {
		rinfo, rerr := rc.Info(ctx, "replication").Result()
		minfo, merr := mc.Info(ctx, "replication").Result()
		switch {
		case rerr != nil:
			last = "replica: " + rerr.Error()
		case merr != nil:
			last = "master: " + merr.Error()
		case infoField(rinfo, "master_link_status") != "up":
			last = "replica: master_link_status:" + infoField(rinfo, "master_link_status")
		case !strings.Contains(minfo, online):
			last = "master: replica not online; connected_slaves:" + infoField(minfo, "connected_slaves")
		case !acknowledges(ctx, mc):
			// Right after a sync, a replica can be online yet not answer the
			// master's GETACK for a while; tests of WAIT need it answering.
			last = "master: WAIT 1 got no acknowledgement"
		default:
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("not replicating after %v: %s", readyTimeout, last)
		case <-tick.C:
		}
	}
}

// acknowledges reports whether a write on the master is acknowledged by a
// replica (WAIT) within 100ms. It uses the connection's own PoolSize 1, so
// the write and the WAIT share one connection, as WAIT requires.
func acknowledges(ctx context.Context, mc *redis.Client) bool {
	pipe := mc.Pipeline()
	pipe.Set(ctx, "redistest:replica-probe", "1", time.Minute)
	acked := pipe.Do(ctx, "WAIT", 1, 100)
	if _, err := pipe.Exec(ctx); err != nil {
		return false
	}
	n, err := acked.Int64()
	return err == nil && n >= 1
}
