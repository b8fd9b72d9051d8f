// Package guard holds leases on named locks in Redis.
package guard
