package boardhost

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

const fakeBoard = "testdata/fake-rk3588-root"

// copyTree copies the stand-in board tree so a test can change it.
func copyTree(t *testing.T, from string) string {
	t.Helper()
	to := t.TempDir()
	err := filepath.WalkDir(from, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(from, p)
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(to, rel), 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(to, rel), b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	return to
}

func collectBoard(t *testing.T, root string, opts ...CollectOption) *Fingerprint {
	t.Helper()
	f, err := Collect(context.Background(), append([]CollectOption{WithRoot(root), WithEnv([]string{"ORK_OFF=0", "HOME=/root", "OMP_NUM_THREADS=4", "PATH=/usr/bin"})}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func TestCollectStandInBoard(t *testing.T) {
	f := collectBoard(t, fakeBoard)
	want := Fingerprint{
		Machine: Machine{
			Hostname: "rk3588-board-1", MachineIDDigest: sumBytes([]byte("5c2b6f0e9d3a4b7c8e1f203a4b5c6d7e")),
			CPUModel: "Rockchip RK3588 EVB7 LP4 V10 Board; CPU parts 0xd05,0xd0b", CPUs: 8, MemTotalKB: 16108904, Arch: "aarch64",
		},
		System: System{
			KernelRelease: "6.1.115-vendor-rk35xx-sram", KernelVersion: "#2 SMP Mon Aug 11 10:12:01 UTC 2026",
			Cmdline:   "storagemedia=emmc androidboot.mode=normal root=PARTUUID=614e0000-0000 rw rootwait earlycon=uart8250,mmio32,0xfeb50000 console=ttyFIQ0 irqchip.gicv3_pseudo_nmi=0 cma=256M",
			Modules:   []Module{{"bcmdhd", 1130496}, {"dw_wdt", 16384}, {"r8125", 106496}},
			NPUDriver: "RKNPU driver: v0.9.8",
		},
		Env:      map[string]string{"ORK_OFF": "0", "OMP_NUM_THREADS": "4"},
		EnvAllow: DefaultEnvAllow,
		Governors: []Probe{
			{Path: "/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor", Value: "performance"},
			{Path: "/sys/devices/system/cpu/cpu4/cpufreq/scaling_governor", Value: "performance"},
			{Path: "/sys/devices/system/cpu/cpu6/cpufreq/scaling_governor", Value: "performance"},
			{Path: "/sys/class/devfreq/dmc/governor", Value: "dmc_ondemand"},
			{Path: "/sys/class/devfreq/fdab0000.npu/governor", Value: "userspace"},
		},
	}
	if !reflect.DeepEqual(f.Machine, want.Machine) || !reflect.DeepEqual(f.System, want.System) ||
		!reflect.DeepEqual(f.Env, want.Env) || !reflect.DeepEqual(f.EnvAllow, want.EnvAllow) || !reflect.DeepEqual(f.Governors, want.Governors) {
		t.Errorf("got  %+v\nwant %+v", *f, want)
	}
	if len(f.Probes) != 0 {
		t.Errorf("probes = %+v, want none (everything is readable on the stand-in)", f.Probes)
	}
}

// TestFingerprintDigest: the digest changes with each part of the key material and only with
// it, and DiffFingerprints names the part.
func TestFingerprintDigest(t *testing.T) {
	base := collectBoard(t, fakeBoard)
	if again := collectBoard(t, fakeBoard); again.Digest() != base.Digest() {
		t.Fatal("digest is not stable across collections")
	}
	for _, tc := range []struct {
		file, content string
		env           []string
		wantPart      string // "" = digest must not change
	}{
		{file: "proc/sys/kernel/version", content: "#1 SMP Tue Jul 8 09:00:00 UTC 2026\n", wantPart: "kernel.version"},
		{file: "proc/sys/kernel/osrelease", content: "6.1.115-vendor-rk35xx\n", wantPart: "kernel.release"},
		{file: "proc/modules", content: "r8125 106496 0 - Live 0x0\nbcmdhd 1130496 0 - Live 0x0\n", wantPart: "module dw_wdt"},
		{file: "sys/module/rknpu/version", content: "RKNPU driver: v0.9.6\n", wantPart: "npu_driver"},
		{file: "etc/machine-id", content: "0000000000000000000000000000000a\n", wantPart: "machine.machine_id"},
		{file: "proc/cmdline", content: "root=/dev/mmcblk0p2\n", wantPart: "kernel.cmdline"},
		{env: []string{"ORK_OFF=1", "OMP_NUM_THREADS=4"}, wantPart: "env ORK_OFF"},
		{env: []string{"ORK_OFF=0", "OMP_NUM_THREADS=4", "HOME=/elsewhere", "TERM=xterm"}}, // not allow-listed
		{file: "sys/class/devfreq/dmc/governor", content: "performance\n"},                 // governors are recorded only
	} {
		root := copyTree(t, fakeBoard)
		if tc.file != "" {
			if err := os.WriteFile(filepath.Join(root, tc.file), []byte(tc.content), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		var opts []CollectOption
		if tc.env != nil {
			opts = append(opts, WithEnv(tc.env))
		}
		f := collectBoard(t, root, opts...)
		diff := DiffFingerprints(base, f)
		if tc.wantPart == "" {
			if f.Digest() != base.Digest() || len(diff) != 0 {
				t.Errorf("%s %v: digest changed (%v)", tc.file, tc.env, diff)
			}
			continue
		}
		if f.Digest() == base.Digest() || len(diff) != 1 || diff[0].Part != tc.wantPart {
			t.Errorf("%s %v: digest changed %t, diff %v; want exactly %s", tc.file, tc.env, f.Digest() != base.Digest(), diff, tc.wantPart)
		}
	}
}

func TestFingerprintJSONVerifiesDigest(t *testing.T) {
	f := collectBoard(t, fakeBoard, WithProgram("/bin/ls"))
	b, err := json.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	var back Fingerprint
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(&back, f) {
		t.Errorf("round trip:\n%+v\n%+v", back, *f)
	}
	for _, edit := range [][2]string{
		{`"hostname":"rk3588-board-1"`, `"hostname":"rk3588-board-2"`},
		{`"kernel_release":"6.1.115-vendor-rk35xx-sram"`, `"kernel_release":"6.1.115"`},
		{`"size":` + jsonNumber(f.Program.Objects[0].Size), `"size":1`}, // sizes are not in the program digest ...
	} {
		tampered := strings.Replace(string(b), edit[0], edit[1], 1)
		if tampered == string(b) {
			t.Fatalf("edit %q did not apply", edit[0])
		}
		err := json.Unmarshal([]byte(tampered), &back)
		if edit[1] == `"size":1` {
			if err != nil {
				t.Errorf("size edit: %v", err)
			}
			continue
		}
		if !errors.Is(err, ErrReport) {
			t.Errorf("edit %q: err = %v, want ErrReport", edit[1], err)
		}
	}
	// ... but object digests are.
	tampered := strings.Replace(string(b), f.Program.Objects[0].Digest, sumBytes([]byte("other")), 1)
	if err := json.Unmarshal([]byte(tampered), &back); !errors.Is(err, ErrReport) {
		t.Errorf("object digest edit: err = %v, want ErrReport", err)
	}
}

func jsonNumber(n int64) string { b, _ := json.Marshal(n); return string(b) }

// TestCollectThisHost runs on the real machine: whatever is unreadable is recorded with its
// reason, and the run program's closure is there.
func TestCollectThisHost(t *testing.T) {
	f, err := Collect(context.Background(), WithProgram("/bin/ls"))
	if err != nil {
		t.Fatal(err)
	}
	if f.System.KernelRelease == Unreadable || f.Machine.Hostname == Unreadable || f.Machine.CPUs < 1 {
		t.Errorf("machine %+v system %+v", f.Machine, f.System)
	}
	probed := map[string]string{}
	for _, p := range f.Probes {
		probed[p.Path] = p.Error
	}
	if _, err := os.Stat("/sys/module/rknpu/version"); err != nil {
		if f.System.NPUDriver != Unreadable || !strings.Contains(probed["/sys/module/rknpu/version"], "no such file") {
			t.Errorf("npu driver %q, probe %q", f.System.NPUDriver, probed["/sys/module/rknpu/version"])
		}
	}
	if _, err := os.Stat("/proc/modules"); err != nil && f.System.Modules != nil {
		t.Errorf("modules %v from an unreadable /proc/modules", f.System.Modules)
	}
	if libc, ok := object(f.Program, "libc.so.6"); !ok || !validDigest(libc.Digest) {
		t.Errorf("program %+v", f.Program)
	}
}

func TestCollectOptionsValidate(t *testing.T) {
	for name, opt := range map[string]CollectOption{
		"root missing":  WithRoot("/no/such/root"),
		"root file":     WithRoot("fingerprint.go"),
		"env entry":     WithEnv([]string{"NOEQUALS"}),
		"bad pattern":   WithEnvAllow("ORK_["),
		"empty program": WithProgram(""),
	} {
		if _, err := Collect(context.Background(), opt); !errors.Is(err, ErrOption) {
			t.Errorf("%s: err = %v, want ErrOption", name, err)
		}
	}
	f, err := Collect(context.Background(), WithRoot(fakeBoard), WithEnv([]string{"RKNN_LOG_LEVEL=3", "ORK_OFF=1"}), WithEnvAllow("RKNN_*"))
	if err != nil || !reflect.DeepEqual(f.Env, map[string]string{"RKNN_LOG_LEVEL": "3"}) {
		t.Errorf("env %v, %v", f.Env, err)
	}
}
