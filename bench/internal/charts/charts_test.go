package charts

import "testing"

func TestThousands(t *testing.T) {
	for v, want := range map[float64]string{0: "0", 999: "999", 1000: "1,000", 32675.4: "32,675", 1234567: "1,234,567", -1234: "-1,234"} {
		if got := thousands(v); got != want {
			t.Errorf("thousands(%v) = %q, want %q", v, got, want)
		}
	}
}

func TestTicks125(t *testing.T) {
	var got []float64
	for _, tk := range (ticks125{}).Ticks(3, 120) {
		got = append(got, tk.Value)
	}
	want := []float64{5, 10, 20, 50, 100}
	if len(got) != len(want) {
		t.Fatalf("ticks = %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("ticks = %v, want %v", got, want)
		}
	}
}
