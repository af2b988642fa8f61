package redisstore

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"time"

	"github.com/redis/rueidis"
)

// Resets reach every process. A guarded Store's deny cache answers a
// denied identity until the denial's Retry-After without asking Redis, so
// a Reset made through another Store (another replica of the service)
// would not reach it: a client unblocked by support staff would stay
// limited on the other replicas until its block ended. So every Reset is
// announced on the Pub/Sub channel resetChannel once its script succeeded,
// and every guarded Store listens there (one subscription per Store: on a
// client of its own when the Store owns its client, see subscriber; else
// on the caller's client) and drops its cached denials of the announced
// keys.
//
// What it does not cover: an announcement published while a Store's
// subscription is down (rueidis subscribes again after a reconnect) is
// missed, and a denial decided before the Reset whose answer arrives after
// the announcement is cached; either ends at its own Retry-After, as
// before. A PUBLISH that fails leaves the Reset done and is logged. On a
// Cluster, PUBLISH reaches every node (classic Pub/Sub); Redis ACLs must
// allow the channel (&quotagate:resets).
const resetChannel = "quotagate:resets"

// maxAnnounced bounds the keys of one announcement a Store reads (one
// identity's records: its quotas of every plan and its block record).
const maxAnnounced = 256

// announce publishes keys on resetChannel through c. Best effort: the
// Reset is done whatever happens here.
func (s *Store) announce(ctx context.Context, c rueidis.Client, keys [][]byte) {
	if err := c.Do(ctx, c.B().Publish().Channel(resetChannel).Message(encodeKeys(keys)).Build()).Error(); err != nil {
		s.logger.Warn("redisstore: a Reset could not be announced to the other processes: their cached denials of the identity end at their own Retry-After",
			slog.String("channel", resetChannel), slog.Any("error", err))
	}
}

// encodeKeys writes keys as length-prefixed strings: "<len>:<key>" each.
func encodeKeys(keys [][]byte) string {
	n := 0
	for _, k := range keys {
		n += len(k) + 4
	}
	b := make([]byte, 0, n)
	for _, k := range keys {
		b = strconv.AppendInt(b, int64(len(k)), 10)
		b = append(b, ':')
		b = append(b, k...)
	}
	return string(b)
}

// decodeKeys reads what encodeKeys wrote; anything else (a message of
// another program on the channel) is nil.
func decodeKeys(m string) [][]byte {
	var keys [][]byte
	for m != "" {
		i := 0
		for i < len(m) && i < 7 && m[i] >= '0' && m[i] <= '9' {
			i++
		}
		if i == 0 || i == len(m) || m[i] != ':' {
			return nil
		}
		n, _ := strconv.Atoi(m[:i])
		m = m[i+1:]
		if n > len(m) || len(keys) == maxAnnounced {
			return nil
		}
		keys = append(keys, []byte(m[:n]))
		m = m[n:]
	}
	return keys
}

// listen subscribes c to resetChannel until Close and drops the denials
// of every announced key from each of the Store's deny caches. The
// subscription shares c's connections, or those of the Store's own
// subscriber (RESP3 lets a subscribed connection run other commands); a
// server that refuses that (miniredis)
// gets no subscription, said once on the logger, since every script call
// on a subscribed connection would fail there. Receive returns when the
// client closes (its owner's Close), when Close cancels it, or when the
// subscribing fails; then, after a pause, it subscribes again.
func (s *Store) listen(ctx context.Context, c rueidis.Client) {
	if !mixes(ctx, c) {
		s.logger.Info("redisstore: the server runs no command on a subscribed connection: Resets made through other processes end this Store's cached denials only at their Retry-After",
			slog.String("channel", resetChannel))
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	s.listening.Store(&listener{cancel: cancel, done: done})
	if s.closed.Load() { // Close ran before the listener was published
		cancel()
	}
	go func() {
		defer close(done)
		if s.subOpt != nil {
			sc := s.subscriber(ctx)
			if sc == nil {
				return
			}
			defer sc.Close()
			c = sc
		}
		handle := func(m rueidis.PubSubMessage) {
			if keys := decodeKeys(m.Message); len(keys) > 0 {
				s.dropDenials(keys)
			}
		}
		for {
			err := c.Receive(ctx, c.B().Subscribe().Channel(resetChannel).Build(), handle)
			if ctx.Err() != nil || errors.Is(err, rueidis.ErrClosing) {
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
			}
		}
	}()
}

// subscriber makes the subscription's own client, from the options the
// Store was dialled with, retrying each second until ctx is done (nil).
// A Store that owns its client subscribes on a client of its own: rueidis
// subscribes again by itself when a subscribed connection breaks,
// dialling without a deadline, and while Redis hung, the decisions it sent
// on the same connection meanwhile waited for that dial, far past their
// store timeout, once a second. A Store on a caller's client (New)
// subscribes on that client.
func (s *Store) subscriber(ctx context.Context) rueidis.Client {
	for {
		if c, err := rueidis.NewClient(*s.subOpt); err == nil {
			return c
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Second):
		}
	}
}

// mixes reports whether c's server runs commands on a subscribed
// connection. Redis 6 and later do under RESP3, and so do the servers that
// answer INFO server as Redis does; miniredis, which refuses both, does not
// (and answers CLUSTER SLOTS, so rueidis may take it for a Cluster: the
// check holds for every mode; on a Cluster INFO goes to one node).
// (Trying it on a connection of its own would cost a dial, and a subscribed
// connection closed under miniredis can stall its other clients.)
func mixes(ctx context.Context, c rueidis.Client) bool {
	return c.Do(ctx, c.B().Info().Section("server").Build()).Error() == nil
}

// listener is a Store's subscription to resetChannel.
type listener struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// stopListening ends the subscription and waits for it, at most a second.
func (s *Store) stopListening() {
	l := s.listening.Load()
	if l == nil {
		return
	}
	l.cancel()
	select {
	case <-l.done:
	case <-time.After(time.Second):
	}
}

// dropDenials drops the cached denials of keys from the Store's guard and,
// on a Cluster, from every master's.
func (s *Store) dropDenials(keys [][]byte) {
	if s.guard != nil {
		s.guard.DropDenials(keys)
	}
	if cr := s.cluster.Load(); cr != nil {
		cr.mu.Lock()
		defer cr.mu.Unlock()
		for _, n := range cr.nodes {
			n.guard.DropDenials(keys)
		}
	}
}
