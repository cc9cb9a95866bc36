package member

import "testing"

func TestAdvertisedIP(t *testing.T) {
	for urls, want := range map[string]string{
		"https://10.0.0.1:2380":       "10.0.0.1",
		"http://[fd00::1]:2380":       "fd00::1",
		"https://etcd-0.example:2380": "<nil>",
		"http://0.0.0.0:2380":         "<nil>",
		"":                            "<nil>",
	} {
		var in []string
		if urls != "" {
			in = []string{urls}
		}
		if got := advertisedIP(in).String(); got != want {
			t.Errorf("%q: %s, want %s", urls, got, want)
		}
	}
}
