package main

import "testing"

func TestGCPercent(t *testing.T) {
	cases := []struct {
		live uint64
		want int
	}{
		{0, 100},
		{10 << 20, 400}, // small heaps: at least 64 MiB, up to GOGC=400
		{32 << 20, 200}, // 64 MiB of headroom
		{64 << 20, 100}, // the floor is exactly the live heap
		{128 << 20, 50}, // the floor is half of it
		{256 << 20, 25}, // a quarter from here on
		{4 << 30, 25},   // a million leases and more
		{200 << 20, 32}, // 64 MiB of 200
		{1 << 62, 25},   // no overflow
	}
	for _, c := range cases {
		if got := gcPercent(c.live); got != c.want {
			t.Errorf("gcPercent(%d MiB) = %d, want %d", c.live>>20, got, c.want)
		}
	}
}
