package transport

import (
	"bytes"
	"errors"
	"slices"
	"testing"
)

func TestFrameBatcherSendsALoneRecordOnItsCaller(t *testing.T) {
	var sent []frame
	b := frameBatcher{send: func(buf frame, ids []uint64) error {
		sent = append(sent, buf)
		return nil
	}}
	if err := b.add(1, []byte("one")); err != nil {
		t.Fatal(err)
	}
	// No goroutine of the batcher's: the frame left before add returned.
	if len(sent) != 1 || string(sent[0]) != "one" {
		t.Fatalf("sent %q, want one frame \"one\"", sent)
	}
}

func TestFrameBatcherGathersWhatWaitsDuringASend(t *testing.T) {
	type sendCall struct {
		buf frame
		ids []uint64
	}
	calls := make(chan sendCall, 10)
	release := make(chan struct{})
	b := frameBatcher{send: func(buf frame, ids []uint64) error {
		calls <- sendCall{buf, ids}
		if ids[0] == 1 {
			<-release
		}
		return nil
	}}
	done := make(chan error)
	go func() { done <- b.add(1, []byte("a")) }()
	first := <-calls // the first send is under way, and blocked
	for id, r := range []string{"b", "c", "d"} {
		// Each returns at once: the sender takes its record along.
		if err := b.add(uint64(id+2), []byte(r)); err != nil {
			t.Fatal(err)
		}
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	second := <-calls
	if string(first.buf) != "a" || !slices.Equal(first.ids, []uint64{1}) {
		t.Fatalf("first frame %q %v, want \"a\" [1]", first.buf, first.ids)
	}
	if string(second.buf) != "bcd" || !slices.Equal(second.ids, []uint64{2, 3, 4}) {
		t.Fatalf("second frame %q %v, want \"bcd\" [2 3 4]", second.buf, second.ids)
	}
	if len(calls) != 0 {
		t.Fatalf("%d more sends, want none", len(calls))
	}
}

func TestFrameBatcherBoundsFrames(t *testing.T) {
	b := frameBatcher{}
	big := bytes.Repeat([]byte("x"), maxFrameBytes/2+1)
	b.recs = [][]byte{big, big, []byte("y")}
	b.ids = []uint64{1, 2, 3}
	buf, ids := b.takeLocked()
	if len(buf) != len(big) || !slices.Equal(ids, []uint64{1}) {
		t.Fatalf("first frame %d bytes, ids %v; want %d bytes, [1]", len(buf), ids, len(big))
	}
	buf, ids = b.takeLocked()
	if len(buf) != len(big)+1 || !slices.Equal(ids, []uint64{2, 3}) {
		t.Fatalf("second frame %d bytes, ids %v; want %d bytes, [2 3]", len(buf), ids, len(big)+1)
	}
	if len(b.recs) != 0 || len(b.ids) != 0 {
		t.Fatalf("%d records left, want none", len(b.recs))
	}
}

func TestFrameBatcherStopsAfterAFailedSend(t *testing.T) {
	broken := errors.New("stream broke")
	sends := 0
	b := frameBatcher{send: func(frame, []uint64) error { sends++; return broken }}
	if err := b.add(1, []byte("a")); !errors.Is(err, broken) {
		t.Fatalf("add = %v, want %v", err, broken)
	}
	if err := b.add(2, []byte("b")); !errors.Is(err, broken) {
		t.Fatalf("add after the failure = %v, want %v", err, broken)
	}
	if sends != 1 {
		t.Fatalf("send called %d times, want 1: nothing is sent on a broken stream", sends)
	}
}
