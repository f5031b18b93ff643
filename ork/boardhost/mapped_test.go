package boardhost

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"orkpipe/internal/testfiles"
)

func TestExecutableMappings(t *testing.T) {
	maps := "55f549834000-55f549836000 r--p 00000000 fe:00 247278   /usr/bin/head\n" +
		"55f549836000-55f54983c000 r-xp 00002000 fe:00 247278   /usr/bin/head\n" +
		"7f00-7f10 r-xp 00000000 fe:00 1  /opt/ork/lib/libggml ork.so (deleted)\n" +
		"7f10-7f20 rw-p 00000000 00:00 0 \n" +
		"7ffd-7ffe r-xp 00000000 00:00 0  [vdso]\n"
	want := []string{"/usr/bin/head", "/opt/ork/lib/libggml ork.so (deleted)"}
	if got := executableMappings(maps); !reflect.DeepEqual(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
}

// TestRunRecordsDlopenedObjects builds a real program that dlopen()s a real plugin (as llama.cpp
// does with GGML_BACKEND_DL backends): the static closure cannot see the plugin, the run-time
// sampling must, with the plugin's digest; and Compare must refuse two runs whose plugin differs.
func TestRunRecordsDlopenedObjects(t *testing.T) {
	cc, err := exec.LookPath("cc")
	if err != nil {
		testfiles.Need(t, "no C compiler to build a dlopen() test program")
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "host.c")
	os.WriteFile(src, []byte(`#include <dlfcn.h>
#include <stdio.h>
#include <unistd.h>
int main(int argc, char **argv) {
	void *h = dlopen(argv[1], RTLD_NOW);
	if (!h) { fprintf(stderr, "dlopen: %s\n", dlerror()); return 1; }
	printf("loaded %s for %s\n", argv[1], argv[2]);
	fflush(stdout);
	sleep(2);
	printf("Final estimate: PPL = 2.4894 +/- 0.03225\n");
	return 0;
}
`), 0o644)
	plugin := filepath.Join(dir, "libggml-ork-probe.so")
	os.WriteFile(filepath.Join(dir, "plugin.c"), []byte("int ork_backend_probe(void) { return 1; }\n"), 0o644)
	host := filepath.Join(dir, "host")
	for _, args := range [][]string{
		{"-shared", "-fPIC", "-o", plugin, filepath.Join(dir, "plugin.c")},
		{"-o", host, src, "-ldl"},
	} {
		if out, err := exec.Command(cc, args...).CombinedOutput(); err != nil {
			t.Fatalf("cc %v: %v\n%s", args, err, out)
		}
	}
	in := tempInputs(t, "")
	run := func() *RunRecord {
		rec, err := Run(context.Background(), host+" "+plugin+" {pack}", in, WithMapSampling(20*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		return rec
	}
	rec := run()
	if _, static := object(rec.Program, "libggml-ork-probe.so"); static {
		t.Fatal("the plugin cannot be in the static closure")
	}
	var got *Object
	for i, o := range rec.Mapped {
		if o.Path == plugin {
			got = &rec.Mapped[i]
		}
		if o.Path == rec.Program.Path || strings.HasSuffix(o.Path, "/libc.so.6") {
			t.Errorf("static object %s also listed as mapped", o.Path)
		}
	}
	want, _ := hashFile(context.Background(), plugin)
	if got == nil || got.Role != RoleMapped || got.Digest != want.Digest {
		t.Fatalf("mapped = %+v, want %s with digest %s", rec.Mapped, plugin, want.Digest)
	}

	// Same host binary, another build of the plugin: not comparable.
	f, err := os.OpenFile(plugin, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Write([]byte("rebuilt"))
	f.Close()
	rec2 := run()
	fp, err := Collect(context.Background(), WithRoot(fakeBoard))
	if err != nil {
		t.Fatal(err)
	}
	report := func(rec *RunRecord) *Report {
		var r Report
		r.SetFingerprint(fp)
		r.SetRun(rec, nil)
		return &r
	}
	_, err = Compare(report(rec), report(rec2), false)
	if err == nil || !strings.Contains(err.Error(), "mapped libggml-ork-probe.so") {
		t.Errorf("err = %v, want the rebuilt plugin named", err)
	}
}
