package server

import (
	"cmp"
	"crypto/tls"
	"slices"
	"sync/atomic"
	"time"
)

// Sessions: what the admin API's connections and consumers pages list.
// Each figure is kept where it happens (a connection's publishes by its
// reader, a subscription's deliveries by its Deliver callback, its
// settles by the reader) as an atomic counter, and Sessions reads them
// without stopping anything.

// SessionInfo is one client connection that completed its Hello.
type SessionInfo struct {
	ID      uint64    `json:"id"`
	Remote  string    `json:"remote"`
	Client  string    `json:"client"` // the client's name from its Hello (Options.ClientName in the Go client)
	Version uint16    `json:"version"`
	TLS     bool      `json:"tls"`
	Since   time.Time `json:"since"`
	// Published counts the publishes it sent; Confirmed those answered
	// with a Confirm (at the queue's boundary).
	Published     uint64             `json:"published"`
	Confirmed     uint64             `json:"confirmed"`
	Subscriptions []SubscriptionInfo `json:"subscriptions"`
}

// SubscriptionInfo is one consumer: a subscription of a connection.
type SubscriptionInfo struct {
	ID       uint32 `json:"id"`
	Queue    string `json:"queue"`
	Prefetch int    `json:"prefetch"`
	// Unsettled is how many deliveries it holds not acked or nacked yet
	// (-1 when a cluster node consumes the queue on its owner and does
	// not know).
	Unsettled int    `json:"unsettled"`
	Delivered uint64 `json:"delivered"`
	Acked     uint64 `json:"acked"`
	Nacked    uint64 `json:"nacked"`
	Paused    bool   `json:"paused"` // over the delivery budget
}

// sessionStats are a connection's figures, set at its Hello and counted
// as it goes.
type sessionStats struct {
	client    string
	version   uint16
	since     time.Time
	published atomic.Uint64
	confirmed atomic.Uint64
}

// subStats are a subscription's figures.
type subStats struct {
	queue     string
	prefetch  int
	delivered atomic.Uint64
	acked     atomic.Uint64
	nacked    atomic.Uint64
}

// held is implemented by consumers that know what they hold unsettled
// (the broker's own subscriptions).
type held interface{ Held() int }

// Sessions lists the client connections that completed their Hello, by
// id, each with its subscriptions.
func (s *Server) Sessions() []SessionInfo {
	s.mu.Lock()
	conns := make([]*conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	out := make([]SessionInfo, 0, len(conns))
	for _, c := range conns {
		if !c.ready.Load() { // its Hello set the stats
			continue
		}
		_, isTLS := c.nc.(*tls.Conn)
		in := SessionInfo{ID: c.id, Remote: c.raw.RemoteAddr().String(), Client: c.stats.client, Version: c.stats.version,
			TLS: isTLS, Since: c.stats.since, Published: c.stats.published.Load(), Confirmed: c.stats.confirmed.Load(),
			Subscriptions: []SubscriptionInfo{}}
		c.pauseMu.Lock()
		for sub, cons := range c.live {
			si := SubscriptionInfo{ID: sub.id, Queue: sub.stats.queue, Prefetch: sub.stats.prefetch, Unsettled: -1,
				Delivered: sub.stats.delivered.Load(), Acked: sub.stats.acked.Load(), Nacked: sub.stats.nacked.Load(),
				Paused: c.paused.Load()}
			if h, ok := cons.(held); ok {
				si.Unsettled = h.Held()
			}
			in.Subscriptions = append(in.Subscriptions, si)
		}
		c.pauseMu.Unlock()
		slices.SortFunc(in.Subscriptions, func(a, b SubscriptionInfo) int { return cmp.Compare(a.ID, b.ID) })
		out = append(out, in)
	}
	slices.SortFunc(out, func(a, b SessionInfo) int { return cmp.Compare(a.ID, b.ID) })
	return out
}
