package redisstore

import (
	"strconv"
	"strings"
	"time"

	"github.com/jobguard/jobguard/guard/internal/store"
)

// The messages of a lock's channel, written by set_counts.lua, acquire.lua
// and inspect.lua, parsed here and nowhere else:
//
//	free <locker>[ <owner>]    the key is free; <owner> when a drop freed it
//	linger <locker>[ <owner>]  a released hold is kept for MinHold
//	held <locker>[ <owner>]    other owners still hold the key
//	read                       readers may join
//	taken                      a waiter took the key
//	grant <locker> <owner> <token>[ <ms left>]

var noticeKinds = map[string]store.NoticeKind{
	"free": store.NoticeFree, "linger": store.NoticeLinger, "held": store.NoticeHeld,
	"read": store.NoticeRead, "taken": store.NoticeTaken, "grant": store.NoticeGrant,
}

// parseNotice parses a message; ok is false for one of another shape.
func parseNotice(payload string) (n store.Notice, ok bool) {
	kind, rest, _ := strings.Cut(payload, " ")
	if n.Kind, ok = noticeKinds[kind]; !ok {
		return n, false
	}
	n.Locker, rest, _ = strings.Cut(rest, " ")
	n.Owner, rest, _ = strings.Cut(rest, " ")
	if n.Kind != store.NoticeGrant {
		return n, true
	}
	digits, ms, _ := strings.Cut(rest, " ")
	token, err := strconv.ParseInt(digits, 10, 64)
	if err != nil || token <= 0 {
		return n, false
	}
	n.Token = token
	if left, err := strconv.ParseInt(ms, 10, 64); err == nil && left > 0 {
		n.Left = time.Duration(left) * time.Millisecond
	}
	return n, true
}
