package drift

import (
	"testing"
	"time"
)

func TestMargin(t *testing.T) {
	for _, tc := range []struct{ d, want time.Duration }{
		{0, 50 * time.Millisecond},
		{time.Second, 60 * time.Millisecond},
		{10 * time.Second, 150 * time.Millisecond},
		{3 * time.Second, 80 * time.Millisecond},
		{time.Minute, 650 * time.Millisecond},
	} {
		if got := Margin(tc.d); got != tc.want {
			t.Errorf("Margin(%v) = %v, want %v", tc.d, got, tc.want)
		}
	}
}
