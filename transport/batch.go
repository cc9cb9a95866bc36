package transport

import "sync"

// frameBatcher sends the records of many goroutines on one stream without
// a goroutine of its own. A caller that finds no send under way sends its
// record itself, and then every record others added meanwhile; a caller
// that finds a send under way leaves its record for that sender and
// returns at once. So a record sent alone leaves on its caller's
// goroutine, with no sender to wake first (on this project's reference
// machine a hand-off between goroutines costs tens of microseconds, and a
// forwarded write made four of them before it was batched this way), and
// records that wait together still travel in one frame, up to
// maxFrameBytes.
//
// A caller that sends waits for its send to end, whatever its own context
// says: on a proposal connection rawWriteTimeout bounds a write, and on
// the gRPC stream the 4 MiB window (peerWindow) keeps SendMsg from waiting
// unless the leader stopped reading.
//
// Concurrency: add may be called from any number of goroutines at once.
// send runs on one goroutine at a time, never with mu held, and gets a new
// frame each time (gRPC may hold the last one after SendMsg returns). Once
// send fails, every later add drops its record and returns that error.
type frameBatcher struct {
	// send sends buf, which holds the records of ids, in add order.
	send func(buf frame, ids []uint64) error

	mu      sync.Mutex
	recs    [][]byte
	ids     []uint64
	sending bool
	err     error
}

// add queues record rec (of id, passed to send) and, if no send is under
// way, sends it and whatever else queues meanwhile. The error is send's,
// from this call or an earlier one.
func (b *frameBatcher) add(id uint64, rec []byte) error {
	b.mu.Lock()
	if b.err != nil {
		err := b.err
		b.mu.Unlock()
		return err
	}
	b.recs = append(b.recs, rec)
	b.ids = append(b.ids, id)
	if b.sending {
		b.mu.Unlock()
		return nil
	}
	b.sending = true
	for len(b.recs) > 0 {
		buf, ids := b.takeLocked()
		b.mu.Unlock()
		err := b.send(buf, ids)
		b.mu.Lock()
		if err != nil {
			b.err = err
			b.recs, b.ids = nil, nil
			break
		}
	}
	b.sending = false
	err := b.err
	b.mu.Unlock()
	return err
}

// takeLocked removes the first records, up to maxFrameBytes (at least one),
// and returns them as one frame.
func (b *frameBatcher) takeLocked() (frame, []uint64) {
	n, size := 0, 0
	for n < len(b.recs) && (n == 0 || size+len(b.recs[n]) <= maxFrameBytes) {
		size += len(b.recs[n])
		n++
	}
	buf := make(frame, 0, size)
	for _, r := range b.recs[:n] {
		buf = append(buf, r...)
	}
	ids := append([]uint64(nil), b.ids[:n]...)
	clear(b.recs[:n])
	if n == len(b.recs) {
		b.recs, b.ids = b.recs[:0], b.ids[:0]
	} else {
		b.recs, b.ids = b.recs[n:], b.ids[n:]
	}
	return buf, ids
}
