package boardhost

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"strings"

	"orkpipe/ork/internal/durable"
)

// ReportFormat identifies the report's JSON layout (see the package documentation).
const ReportFormat = "orkpipe.board-verify/v1"

// Check is one verification step's outcome. Other packages' checks (integrity, stub against
// pack, loader coverage, fit) are appended as Checks too.
type Check struct {
	Name   string `json:"name"`
	OK     bool   `json:"ok"`
	Detail string `json:"detail"`
}

// Report is the result of verifying a pack on a board host. The zero value is an empty report;
// it is OK only once it has at least one check and every check passed.
type Report struct {
	Checks      []Check      `json:"checks"`
	Inputs      []FileDigest `json:"inputs,omitempty"` // pack, stub and text as hashed before the run
	Fingerprint *Fingerprint `json:"fingerprint,omitempty"`
	Run         *RunRecord   `json:"run,omitempty"`
}

// OK reports whether r has at least one check and all passed.
func (r *Report) OK() bool {
	for _, c := range r.Checks {
		if !c.OK {
			return false
		}
	}
	return len(r.Checks) > 0
}

// Add appends a check named name: passed when err is nil (with detail), failed otherwise (the
// error text is the detail).
func (r *Report) Add(name string, err error, detail string) {
	if err != nil {
		r.Checks = append(r.Checks, Check{Name: name, OK: false, Detail: err.Error()})
		return
	}
	r.Checks = append(r.Checks, Check{Name: name, OK: true, Detail: detail})
}

// Failed lists the names of the failed checks.
func (r *Report) Failed() []string {
	var names []string
	for _, c := range r.Checks {
		if !c.OK {
			names = append(names, c.Name)
		}
	}
	return names
}

// SetFingerprint records f and adds the check "fingerprint", which fails when the run program
// has objects the loader search could not find (what would run is then not fully known).
func (r *Report) SetFingerprint(f *Fingerprint) {
	r.Fingerprint = f
	var err error
	detail := fmt.Sprintf("%s; machine %s; kernel %s", f.Digest(), f.Machine.Hostname, f.System.KernelRelease)
	if f.Program != nil {
		if un := f.Program.Unresolved(); len(un) > 0 {
			err = fmt.Errorf("program %s: shared objects not found: %s", f.Program.Path, strings.Join(un, ", "))
		}
		detail += fmt.Sprintf("; program %s %s (%d objects)", f.Program.Path, f.Program.Digest, len(f.Program.Objects))
	}
	r.Add("fingerprint", err, detail)
}

// SetRun records a run (rec may be nil when the command never started) and its outcome: the
// checks "inputs-unchanged" (when the inputs were hashed after the run) and "run".
func (r *Report) SetRun(rec *RunRecord, runErr error) {
	r.Run = rec
	if rec == nil {
		r.Add("run", runErr, "")
		return
	}
	r.Inputs = rec.Before
	if rec.After != nil {
		var changed []string
		for i := range rec.Before {
			if i >= len(rec.After) || rec.Before[i].Digest != rec.After[i].Digest {
				changed = append(changed, rec.Before[i].Role)
			}
		}
		var err error
		if len(changed) > 0 {
			err = fmt.Errorf("%s changed during run", strings.Join(changed, " and "))
		}
		var roles []string
		for _, d := range rec.Before {
			roles = append(roles, d.Role)
		}
		r.Add("inputs-unchanged", err, strings.Join(roles, ", ")+" hashed before and after the run: unchanged")
	}
	detail := fmt.Sprintf("%s exited %d in %.1f s", rec.Argv[0], rec.ExitCode, rec.DurationS)
	if rec.Scores != nil {
		detail += "; " + rec.Scores.summary()
	}
	r.Add("run", runErr, detail)
}

func (s *Scores) summary() string {
	out := fmt.Sprintf("PPL %.4f ± %.5f (%s, %d chunks)", s.PPL, s.PPLErr, s.PPLSource, s.Chunks)
	if v, ok := s.KLD["mean"]; ok {
		out += fmt.Sprintf(", mean KLD %.6f", v)
	}
	if v, ok := s.KLD["same_top_p_pct"]; ok {
		out += fmt.Sprintf(", same top p %.3f%%", v)
	}
	return out
}

type plainReport Report

// MarshalJSON adds "format" and "ok".
func (r Report) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Format string `json:"format"`
		OK     bool   `json:"ok"`
		plainReport
	}{ReportFormat, r.OK(), plainReport(r)})
}

// DecodeReport reads one report and verifies it: format, "ok" against the checks, digests'
// syntax, fingerprint and program digests against their parts, scores finite and positive.
func DecodeReport(rd io.Reader) (*Report, error) {
	var v struct {
		Format *string `json:"format"`
		OK     *bool   `json:"ok"`
		plainReport
	}
	dec := json.NewDecoder(rd)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrReport, err)
	}
	if v.Format == nil || *v.Format != ReportFormat {
		got := "missing"
		if v.Format != nil {
			got = fmt.Sprintf("%q", *v.Format)
		}
		return nil, fmt.Errorf("%w: field \"format\": want %q, got %s", ErrReport, ReportFormat, got)
	}
	r := Report(v.plainReport)
	if v.OK == nil {
		return nil, fmt.Errorf("%w: field \"ok\" missing", ErrReport)
	}
	if *v.OK != r.OK() {
		return nil, fmt.Errorf("%w: field \"ok\" is %t but the checks say %t (failed: %v)", ErrReport, *v.OK, r.OK(), r.Failed())
	}
	for i, c := range r.Checks {
		if c.Name == "" {
			return nil, fmt.Errorf("%w: checks[%d]: empty name", ErrReport, i)
		}
	}
	var digests []FileDigest
	digests = append(digests, r.Inputs...)
	if r.Run != nil {
		digests = append(append(digests, r.Run.Before...), r.Run.After...)
		if r.Run.Program == nil {
			return nil, fmt.Errorf("%w: run without \"program\"", ErrReport)
		}
		for _, o := range r.Run.Mapped {
			if o.Path != "" && !validDigest(o.Digest) {
				return nil, fmt.Errorf("%w: run: mapped %s: digest %q is not blake3:<64 hex>", ErrReport, o.Path, o.Digest)
			}
		}
		if s := r.Run.Scores; s != nil {
			if !(s.PPL > 0) || math.IsInf(s.PPL, 0) || s.PPLSource == "" {
				return nil, fmt.Errorf("%w: run: ppl %v from %q is not a positive finite perplexity", ErrReport, s.PPL, s.PPLSource)
			}
		}
	}
	for _, d := range digests {
		if !validDigest(d.Digest) {
			return nil, fmt.Errorf("%w: %s %s: digest %q is not blake3:<64 hex>", ErrReport, d.Role, d.Path, d.Digest)
		}
	}
	return &r, nil
}

// ReadReport reads and verifies the report file at path (see DecodeReport).
func ReadReport(path string) (*Report, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("report %s: %w", path, err)
	}
	defer f.Close()
	r, err := DecodeReport(f)
	if err != nil {
		return nil, fmt.Errorf("report %s: %w", path, err)
	}
	return r, nil
}

// WriteFile writes r as indented JSON to path through a temporary file in the same directory,
// renamed into place once synced, so that a reader never sees half a report. The temporary file is
// locked while written (durable.CreateTemp): one that a killed process left in the directory is
// removed by the next WriteFile of path.
func (r *Report) WriteFile(path string) (err error) {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding report: %w", err)
	}
	tmp, name, err := durable.CreateTemp(path)
	if err != nil {
		return fmt.Errorf("writing report %s: %w", path, err)
	}
	defer tmp.Close() // after the rename: the lock is held until then
	defer func() {
		if err != nil {
			os.Remove(name)
		}
	}()
	if _, err = tmp.Write(append(b, '\n')); err == nil {
		err = tmp.Sync()
	}
	if err == nil {
		err = tmp.Chmod(0o644)
	}
	if err == nil {
		err = os.Rename(name, path)
	}
	if err != nil {
		return fmt.Errorf("writing report %s: %w", path, err)
	}
	return nil
}

// WriteSummary writes a short human summary of r.
func (r *Report) WriteSummary(w io.Writer) error {
	var b bytes.Buffer
	if r.OK() {
		fmt.Fprintf(&b, "verify: PASSED (%d checks)\n", len(r.Checks))
	} else {
		fmt.Fprintf(&b, "verify: FAILED (%d of %d checks failed: %s)\n", len(r.Failed()), len(r.Checks), strings.Join(r.Failed(), ", "))
	}
	for _, c := range r.Checks {
		mark := "ok  "
		if !c.OK {
			mark = "FAIL"
		}
		first, _, _ := strings.Cut(c.Detail, "\n")
		fmt.Fprintf(&b, "  %s  %-18s %s\n", mark, c.Name, first)
	}
	if f := r.Fingerprint; f != nil {
		fmt.Fprintf(&b, "machine      %s (%s, %d CPUs, %d MiB), kernel %s %s, npu driver %s\n",
			f.Machine.Hostname, f.Machine.CPUModel, f.Machine.CPUs, f.Machine.MemTotalKB/1024,
			f.System.KernelRelease, f.System.KernelVersion, f.System.NPUDriver)
		fmt.Fprintf(&b, "fingerprint  %s\n", f.Digest())
	}
	if r.Run != nil && r.Run.Program != nil {
		fmt.Fprintf(&b, "program      %s %s (%d objects, %d more mapped at run time)\n", r.Run.Program.Path, r.Run.Program.Digest, len(r.Run.Program.Objects), len(r.Run.Mapped))
	}
	for _, d := range r.Inputs {
		fmt.Fprintf(&b, "%-12s %s %s\n", d.Role, d.Digest, d.Path)
	}
	if r.Run != nil && r.Run.Scores != nil {
		fmt.Fprintf(&b, "score        %s\n", r.Run.Scores.summary())
	}
	_, err := w.Write(b.Bytes())
	return err
}

// digestOf returns the digest of the input with role, or "".
func (r *Report) digestOf(role string) string {
	for _, d := range r.Inputs {
		if d.Role == role {
			return d.Digest
		}
	}
	return ""
}
