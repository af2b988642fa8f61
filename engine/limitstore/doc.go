// Package limitstore is the contract between quotagate's engine (package
// limit) and its stores: what a store is asked ([Op]: take a cost from up
// to [MaxQuotas] quotas of one identity, all or nothing, or give it back),
// what it answers ([Result]), and the one function that decides ([Op.Apply],
// the rate-limit math: sliding window, fixed window, and token bucket as
// GCRA). A store adds atomicity and persistence around Apply: it reads the
// [State] under each quota's key, calls Apply at its clock reading, and
// writes back what the [Store] contract says, as one atomic step.
//
// The rest is optional: a store that describes itself (Describe() [Info])
// names its metrics label and says whether other processes share its
// records; one that is a [Resetter] serves limit.Limiter's Peek and Reset
// (a Reset moves each live State to the next [State.Epoch], and a Refund
// gives back only to the epoch of its charge, [Quota.Epoch]);
// one that is a [Leaser] serves Concurrency policies; one whose Info.Blocks
// is set decides Policy.BlockFor's blocks with [Op.ApplyBlock]; one that
// embeds [Claims] lets limit.New refuse a second unnamed Limiter with the
// same numbers.
//
// A store author needs only this package (and, for a store that waits on
// I/O, package guard for a timeout, a circuit breaker and a deny cache).
// Every number stays below 2^53, so a store that computes in doubles (a Lua
// script) can transcribe Apply exactly. The package imports only the
// standard library.
package limitstore
