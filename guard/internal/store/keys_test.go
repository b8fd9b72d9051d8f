package store

import "testing"

// KeysFor builds the four names in one string; each must read as its
// concatenation would.
func TestKeysFor(t *testing.T) {
	for _, tc := range []struct{ prefix, name string }{
		{"guard:", "job"},
		{"", "x"},
		{"p:", "a:b:c"},
		{"guard:", "clé 日本"},
	} {
		t.Run(tc.prefix+tc.name, func(t *testing.T) {
			base := tc.prefix + "{" + tc.name + "}"
			want := Keys{Lock: base, Fence: base + ":fence", Channel: base + ":released", Waiters: base + ":waiters"}
			if got := KeysFor(tc.prefix, tc.name); got != want {
				t.Fatalf("KeysFor(%q, %q) = %+v, want %+v", tc.prefix, tc.name, got, want)
			}
		})
	}
}
