package progress_test

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"orkpipe/pipelines/progress"
)

// TestRatesFileRoundTrip: the rates file keeps what builds measured: a missing file reads as none; a
// build's rates read back as kept; the next build's add to half the sums of the rates it measured
// again (the newer build weighs more), the others stay as they were.
func TestRatesFileRoundTrip(t *testing.T) {
	dir := t.TempDir()
	path := progress.RatesFile(dir)
	if want := filepath.Join(dir, "_rates"); path != want {
		t.Fatalf("RatesFile = %s, want %s", path, want)
	}
	if got, err := progress.ReadRates(path); got != nil || err != nil {
		t.Fatalf("a missing file: %v, %v; want no rates and no error", got, err)
	}
	then := time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC)
	now := then.Add(time.Hour)
	first := []progress.StageRate{
		{Stage: "calibrate", Large: true, Share: 100 * time.Second, Cost: 200 * time.Second, Measured: then},
		{Stage: "tile", Share: 3 * time.Second, Cost: 2 * time.Second, Measured: then},
	}
	if err := progress.KeepRates(path, first); err != nil {
		t.Fatal(err)
	}
	if got, err := progress.ReadRates(path); err != nil || !reflect.DeepEqual(got, first) {
		t.Fatalf("read back %v, %v; want %v", got, err, first)
	}
	second := []progress.StageRate{{Stage: "calibrate", Large: true, Share: 60 * time.Second, Cost: 80 * time.Second, Measured: now}}
	if err := progress.KeepRates(path, second); err != nil {
		t.Fatal(err)
	}
	want := []progress.StageRate{
		{Stage: "calibrate", Large: true, Share: 110 * time.Second, Cost: 180 * time.Second, Measured: now},
		{Stage: "tile", Share: 3 * time.Second, Cost: 2 * time.Second, Measured: then},
	}
	if got, err := progress.ReadRates(path); err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("after a second build: %v, %v; want %v", got, err, want)
	}
}

// TestReadRatesRejects: a damaged rates file is an error naming the file and what is wrong, and the
// next KeepRates replaces it, saying so.
func TestReadRatesRejects(t *testing.T) {
	const rate = `{"stage":"tile","share_ms":5,"cost_ms":4,"measured":"2026-12-07T00:00:00Z"}`
	for name, tc := range map[string]struct{ text, want string }{
		"not JSON":       {`{"version":2,`, "unexpected EOF"},
		"version":        {`{"version":3,"rates":[]}`, "version 3, want 2"},
		"unknown field":  {`{"version":2,"rates":[],"kinds":[]}`, `unknown field "kinds"`},
		"no stage":       {`{"version":2,"rates":[{"stage":"","share_ms":1,"cost_ms":1}]}`, `rates[0] (""): want a stage`},
		"negative share": {`{"version":2,"rates":[{"stage":"tile","share_ms":-1,"cost_ms":1}]}`, "0 <= share_ms"},
		"no cost":        {`{"version":2,"rates":[{"stage":"tile","share_ms":1,"cost_ms":0}]}`, "1 <= cost_ms"},
		"cost too large": {`{"version":2,"rates":[{"stage":"tile","share_ms":1,"cost_ms":9223372036854775}]}`, "1 <= cost_ms <= 1099511627776"},
		"a rate twice":   {`{"version":2,"rates":[` + rate + `,` + rate + `]}`, `rates[1]: stage "tile" (large false) listed twice`},
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "_rates")
			if err := os.WriteFile(path, []byte(tc.text), 0o644); err != nil {
				t.Fatal(err)
			}
			got, err := progress.ReadRates(path)
			if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("ReadRates = %v, %v; want an error naming %s and %q", got, err, path, tc.want)
			}
			measured := []progress.StageRate{{Stage: "tile", Share: time.Second, Cost: time.Second}}
			if err := progress.KeepRates(path, measured); err == nil || !strings.Contains(err.Error(), "replaced by this build's rates") {
				t.Errorf("KeepRates over a damaged file: %v, want it reported", err)
			}
			if got, err := progress.ReadRates(path); err != nil || len(got) != 1 || got[0].Share != time.Second {
				t.Errorf("after KeepRates: %v, %v; want the build's rate alone", got, err)
			}
		})
	}
}

// TestReadRatesVersion1: a file of the format's first version (rates of costs at the reference
// host's speed, before the host's speeds were measured) reads as no rates, without an error, and the
// next KeepRates replaces it without one.
func TestReadRatesVersion1(t *testing.T) {
	path := filepath.Join(t.TempDir(), "_rates")
	old := `{"version":1,"rates":[{"stage":"calibrate","large":true,"share_ms":95316,"cost_ms":167675,"measured":"2026-12-07T00:21:08Z"}]}`
	if err := os.WriteFile(path, []byte(old), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := progress.ReadRates(path); err != nil || len(got) != 0 {
		t.Fatalf("ReadRates of a version 1 file = %v, %v; want none", got, err)
	}
	measured := []progress.StageRate{{Stage: "tile", Share: time.Second, Cost: time.Second}}
	if err := progress.KeepRates(path, measured); err != nil {
		t.Fatal(err)
	}
	if got, err := progress.ReadRates(path); err != nil || len(got) != 1 || got[0].Stage != "tile" {
		t.Fatalf("after KeepRates: %v, %v; want the build's rate alone", got, err)
	}
}

// FuzzReadRates: any bytes either fail to read or read as rates that keep and read back the same.
func FuzzReadRates(f *testing.F) {
	f.Add([]byte(`{"version":2,"rates":[{"stage":"calibrate","large":true,"share_ms":95316,"cost_ms":167675,"measured":"2026-12-07T00:21:08Z"}]}`))
	f.Add([]byte(`{"version":2,"rates":null}`))
	f.Add([]byte(`{"version":1,"rates":[{"stage":"calibrate","large":true,"share_ms":95316,"cost_ms":167675,"measured":"2026-12-07T00:21:08Z"}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(t.TempDir(), "_rates")
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		rates, err := progress.ReadRates(path)
		if err != nil {
			return
		}
		if err := progress.KeepRates(path, nil); err != nil {
			t.Fatal(err)
		}
		again, err := progress.ReadRates(path)
		if err != nil {
			t.Fatalf("rates kept from a read file do not read: %v", err)
		}
		if len(rates) == 0 && len(again) == 0 {
			return
		}
		want := progress.MergeRates(rates, nil)
		for i := range want {
			want[i].Measured = want[i].Measured.UTC()
		}
		if !reflect.DeepEqual(want, again) {
			t.Errorf("read back %v, want %v", again, want)
		}
	})
}
