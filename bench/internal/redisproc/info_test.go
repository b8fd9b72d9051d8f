package redisproc

import "testing"

func TestParseInfoAndSub(t *testing.T) {
	before, err := parseInfo("# CPU\r\nused_cpu_sys:1.500000\r\nused_cpu_user:2.000000\r\n# Commandstats\r\n" +
		"cmdstat_set:calls=10,usec=20,usec_per_call=2.00,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_info:calls=1,usec=5,usec_per_call=5.00,rejected_calls=0,failed_calls=0\r\n")
	if err != nil {
		t.Fatal(err)
	}
	after, err := parseInfo("used_cpu_sys:2.000000\r\nused_cpu_user:2.250000\r\n" +
		"cmdstat_set:calls=15,usec=30,usec_per_call=2.00\r\n" +
		"cmdstat_info:calls=2,usec=9,usec_per_call=4.50\r\n" +
		"cmdstat_evalsha:calls=3,usec=12,usec_per_call=4.00\r\n")
	if err != nil {
		t.Fatal(err)
	}
	d := after.Sub(before, "info")
	if d.CPUSeconds != 0.75 {
		t.Errorf("CPUSeconds = %v, want 0.75", d.CPUSeconds)
	}
	want := map[string]Command{"set": {Calls: 5, Usec: 10}, "evalsha": {Calls: 3, Usec: 12}}
	if len(d.Commands) != len(want) {
		t.Errorf("Commands = %v, want %v", d.Commands, want)
	}
	for name, c := range want {
		if d.Commands[name] != c {
			t.Errorf("%s = %+v, want %+v", name, d.Commands[name], c)
		}
	}
	if d.Calls() != 8 {
		t.Errorf("Calls = %d, want 8", d.Calls())
	}
}

func TestParseInfoRejectsGarbage(t *testing.T) {
	if _, err := parseInfo("cmdstat_set:calls=x,usec=1\r\n"); err == nil {
		t.Error("no error for calls=x")
	}
}
