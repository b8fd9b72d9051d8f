package store

import "time"

// Notice is one message of a lock's channel: what a release, an
// acquisition or an operator's override tells the waiting Lockers.
type Notice struct {
	Kind NoticeKind
	// Locker is the Locker named to act ("" for none); for a NoticeGrant, the
	// grantee's.
	Locker string
	// Owner is a NoticeGrant's grantee, or the owner whose drop (a hold never
	// handed to its caller) sent the notice; "" for a release.
	Owner string
	Token int64         // NoticeGrant: the granted hold's fencing token
	Left  time.Duration // NoticeGrant: how long the grant lasts unless renewed; 0 when not told
}

// NoticeKind says what happened.
type NoticeKind uint8

const (
	// NoticeFree: the key is free; the named Locker's first waiter should try.
	NoticeFree NoticeKind = iota + 1
	// NoticeLinger: a released hold is kept for MinHold; the named Locker's first
	// waiter should re-read how long.
	NoticeLinger
	// NoticeHeld: other owners still hold the key; the first waiter should
	// re-read how long they may.
	NoticeHeld
	// NoticeRead: readers may join (a writer downgraded, or a reader took the key).
	NoticeRead
	// NoticeTaken: a waiter took the key with an attempt of its own.
	NoticeTaken
	// NoticeGrant: a release gave the key to the named acquisition.
	NoticeGrant
)
