package redisstore

import (
	"crypto/rand"
	"encoding/hex"
	"strconv"
)

// Requests in flight: on Redis a tenant's slots are one sorted set under
// its key, a member per slot, scored by the end of its lease on the
// server's clock: the request's token, and for a cost of n the token
// followed by ".2" to ".n" for the others (see take.lua, kinds i and y).
// The key expires a lease after the last lease ends, so that a request of
// the tenant in that time still counts the slots it drops.

// processToken names this process among the replicas that share a Redis:
// random, so that two replicas' slots never share a name.
var processToken = func() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}()

// slotToken is the member of a sorted set that names slot: the process's
// token and the slot's number.
func slotToken(slot uint64) string {
	var b [len("0123456789abcdef:0123456789abcdef")]byte
	return string(strconv.AppendUint(append(append(b[:0], processToken...), ':'), slot, 16))
}
