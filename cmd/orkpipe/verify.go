package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/spf13/cobra"

	"orkpipe/artifacts"
	"orkpipe/ork/boardhost"
	"orkpipe/pipelines/verify"
	"orkpipe/registry"
)

type verifyFlags struct {
	transportFlags
	board     string
	run       string
	text      string
	timeout   time.Duration
	attest    string
	sign      string
	report    string
	out       string
	trust     []string
	allowZero []string
	noScore   bool
	list      bool
	envAllow  []string
}

func newVerifyCommand(opts *globalOptions) *cobra.Command {
	var f verifyFlags
	cmd := &cobra.Command{
		Use:   "verify DIR|REF",
		Short: "Verify a pulled pack on the board host (integrity, stub, loader coverage, fit, fingerprint, guarded run)",
		Long: `verify is the step between pull and run on a board host. For a build directory DIR (or REF, first
pulled into -o DIR, every part verified) it checks every file against provenance.json, the pack's
header, footer, index and every entry hash, the stub header against the source header recorded at
build time, the stub against the pack (owned tensors are holes, no other tensor is all zero), that
every entry decodes through its dtype's loader, and that the domain plan fits the board profile.
It fingerprints the host (kernel, cmdline, modules, NPU driver, governors, allow-listed env) and,
with --run, the run binary and every shared library it loads; then runs the command with {pack},
{stub} and {text} replaced (no shell unless you write sh -c), under --timeout, hashing pack and stub
before and after, and parses llama-perplexity output. The command is not started if a check failed.

The report is JSON (--report FILE, or --json on stdout) plus a short summary; the exit status is
non-zero when any check failed. Files of DIR that provenance.json does not list are not verified: they
fail no check (a board directory may hold other files), but a warning names them ("unlisted_files"
in --json; orkpipe's own hidden .orkpipe-* files are left out). --attest REF --sign KEY attaches the report as a signed referrer of
the pack's manifest, so 'orkpipe describe REF' on the build side lists the verification.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usagef("verify: want one build directory or artifact reference, got %d arguments", len(args))
			}
			return runVerify(cmd.Context(), opts, &f, args[0])
		},
	}
	f.register(cmd)
	fl := cmd.Flags()
	fl.StringVar(&f.board, "board", "", "board profile: built-in name or JSON/YAML file (default: the one the pack was planned for)")
	fl.StringVar(&f.run, "run", "", "command to run against the pack, e.g. 'llama-perplexity -m {stub} --ork-pack {pack} -f {text}'")
	fl.StringVar(&f.text, "text", "", "evaluation text file, substituted for {text}")
	fl.DurationVar(&f.timeout, "timeout", 6*time.Hour, "kill the run command (and its process group) after this long")
	fl.BoolVar(&f.noScore, "no-score", false, "accept a run that prints no perplexity (a smoke test)")
	fl.StringVar(&f.attest, "attest", "", "attach the report as a signed attestation to this artifact REF (needs --sign)")
	fl.StringVar(&f.sign, "sign", "", "ed25519 private key file to sign the attestation with")
	fl.StringVar(&f.report, "report", "", "write the JSON report to this file")
	fl.StringVarP(&f.out, "out", "o", "", "directory to pull REF into (default: <cache>/verify/<ref>, which needs a writable cache)")
	fl.StringArrayVar(&f.trust, "trust", nil, "when pulling REF: require a provenance signed by this ed25519 public key (repeatable)")
	fl.StringArrayVar(&f.envAllow, "env-allow", nil, "environment variable pattern recorded in the fingerprint, replacing the default list "+strings.Join(boardhost.DefaultEnvAllow, " ")+" (repeatable)")
	fl.BoolVar(&f.list, "list", false, "list the board verifications attached to REF (with --trust: which are signed by a trusted key) instead of verifying")
	fl.StringArrayVar(&f.allowZero, "allow-zero", nil, "stub tensor not owned by the pack that is legitimately all zero (repeatable)")
	return cmd
}

func runVerify(ctx context.Context, opts *globalOptions, f *verifyFlags, target string) error {
	if f.list {
		return runVerifyList(ctx, opts, f, target)
	}
	if f.text != "" && f.run == "" {
		return usagef("--text is only used by --run")
	}
	if f.timeout <= 0 {
		return usagef("--timeout: must be positive, got %s", f.timeout)
	}
	if (f.attest == "") != (f.sign == "") {
		return usagef("--attest and --sign go together")
	}
	var vopts []verify.Option
	vopts = append(vopts, verify.WithJobs(opts.jobs), verify.WithLogger(opts.logger))
	if f.board != "" {
		p, err := packProfile(nil, "", f.board)
		if err != nil {
			return err
		}
		vopts = append(vopts, verify.WithProfile(p))
	}
	if f.run != "" {
		if _, err := boardhost.SplitCommand(f.run); err != nil {
			return usagef("--run: %v", err)
		}
		ropts := []boardhost.RunOption{boardhost.WithTimeout(f.timeout)}
		if f.noScore {
			ropts = append(ropts, boardhost.WithoutScore())
		}
		if opts.verbose > 0 {
			ropts = append(ropts, boardhost.WithOutput(opts.stderr))
		}
		vopts = append(vopts, verify.WithRun(f.run, f.text, ropts...))
	}
	if len(f.allowZero) > 0 {
		vopts = append(vopts, verify.WithAllowZero(f.allowZero...))
	}
	if len(f.envAllow) > 0 {
		for _, p := range f.envAllow {
			if _, err := path.Match(p, ""); err != nil || p == "" {
				return usagef("--env-allow %q: not a valid pattern", p)
			}
		}
		vopts = append(vopts, verify.WithCollect(boardhost.WithEnvAllow(f.envAllow...)))
	}
	var key []byte
	if f.sign != "" {
		k, err := registry.LoadPrivateKey(f.sign)
		if err != nil {
			return usagef("--sign: %v", err)
		}
		key = k
	}

	dir := target
	if st, err := os.Stat(target); err != nil || !st.IsDir() {
		if !looksLikeRef(target) {
			return usagef("%s: not a build directory, and not an artifact reference (HOST[:PORT]/REPO[:TAG|@DIGEST])", target)
		}
		if dir, err = pullForVerify(ctx, opts, f, target); err != nil {
			return err
		}
	} else if f.out != "" || len(f.trust) > 0 {
		return usagef("-o and --trust apply to a REF, not to the directory %s", target)
	}

	res, err := verify.Dir(ctx, dir, vopts...)
	if err != nil {
		return err
	}
	if f.report != "" {
		if err := res.Report.WriteFile(f.report); err != nil {
			return err
		}
	}
	var attestation string
	if f.attest != "" {
		ropts, err := f.options(f.attest)
		if err != nil {
			return err
		}
		ropts = append(ropts, registry.WithSigner(key), registry.WithLogger(opts.logger))
		if attestation, err = verify.Attest(ctx, f.attest, res, ropts...); err != nil {
			return fmt.Errorf("verification done (ok=%v) but not attested: %w", res.Report.OK(), err)
		}
	}
	if opts.json {
		rb, err := json.Marshal(res.Report)
		if err != nil {
			return err
		}
		// The report's fields plus "unlisted_files" and "attestation" (keys then sorted).
		var m map[string]json.RawMessage
		if err := json.Unmarshal(rb, &m); err != nil {
			return err
		}
		m["unlisted_files"], _ = json.Marshal(append([]string{}, res.Unlisted...))
		if attestation != "" {
			m["attestation"], _ = json.Marshal(attestation)
		}
		if rb, err = json.Marshal(m); err != nil {
			return err
		}
		if _, err := fmt.Fprintf(opts.stdout, "%s\n", rb); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(opts.stdout, "%s\n", res.Files.Dir)
		if err := res.Report.WriteSummary(opts.stdout); err != nil {
			return err
		}
		writeRunTail(opts.stdout, res.Report)
		writeUnlisted(opts.stdout, res)
		if attestation != "" {
			fmt.Fprintf(opts.stdout, "attested %s as %s\n", f.attest, attestation)
		}
	}
	if !res.Report.OK() {
		return fmt.Errorf("verification of %s failed: %s", res.Files.Dir, strings.Join(res.Report.Failed(), ", "))
	}
	return nil
}

// writeRunTail prints the last lines of a failed run's output (the report keeps up to
// boardhost.DefaultTailLines of them).
func writeRunTail(w io.Writer, rep *boardhost.Report) {
	if rep.Run == nil || len(rep.Run.Tail) == 0 || !slices.Contains(rep.Failed(), "run") && !slices.Contains(rep.Failed(), "inputs-unchanged") {
		return
	}
	tail := rep.Run.Tail[max(0, len(rep.Run.Tail)-runTailLines):]
	fmt.Fprintf(w, "last %d lines of output (%d in the report):\n", len(tail), len(rep.Run.Tail))
	for _, l := range tail {
		fmt.Fprintf(w, "  | %s\n", l)
	}
}

// writeUnlisted warns of the files of the directory that provenance.json does not list: they fail no
// check, but nothing verified them.
func writeUnlisted(w io.Writer, res *verify.Result) {
	if len(res.Unlisted) == 0 {
		return
	}
	names := make([]string, len(res.Unlisted))
	for i, n := range res.Unlisted {
		names[i] = shown(n)
	}
	fmt.Fprintf(w, "warning: %d file(s) in %s not listed in %s, not verified: %s\n",
		len(names), shown(res.Files.Dir), verify.ProvenanceFile, strings.Join(names, ", "))
}

// runTailLines is how many output lines of a failed run the human summary shows.
const runTailLines = 12

// looksLikeRef reports whether s is an artifact reference that names its registry explicitly, so that a
// mistyped directory ("build-out", "out/stories") is never taken for a Docker Hub repository.
func looksLikeRef(s string) bool {
	host, _, ok := strings.Cut(s, "/")
	if !ok || !(strings.ContainsAny(host, ".:") || host == "localhost") {
		return false
	}
	_, err := name.ParseReference(s)
	return err == nil
}

// pullForVerify pulls ref into -o DIR (default <cache>/verify/<ref as a file name>); registry.Pull
// verifies every part and every whole file before it appears, and resumes or skips what is there.
// Without -o on a cache this process may not write (a read-only mount shared with board hosts), it
// fails before pulling, naming the cache and asking for -o: it does not pull a pack of many GiB
// into a temporary directory the operator did not choose (on a board often a RAM-backed /tmp), to
// be pulled again in full by the next verify.
func pullForVerify(ctx context.Context, opts *globalOptions, f *verifyFlags, ref string) (string, error) {
	dir := f.out
	if dir == "" {
		cache, err := opts.cache()
		if err != nil {
			return "", err
		}
		safe := strings.NewReplacer("/", "_", ":", "_", "@", "_").Replace(ref)
		dir = filepath.Join(cache, "verify", safe)
		if err := artifacts.Writable(dir); err != nil {
			return "", fmt.Errorf("verify %s pulls into %s by default, and the cache is not writable: %w; pass -o DIR, a directory with room for the artifact (kept, so that another verify resumes or reuses it), or --cache a writable cache", ref, dir, err)
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	ropts, err := f.options(ref)
	if err != nil {
		return "", err
	}
	tr, err := trustOptions(f.trust)
	if err != nil {
		return "", err
	}
	ropts = append(ropts, tr...)
	ropts = append(ropts, registry.WithJobs(opts.jobs), registry.WithLogger(opts.logger))
	if _, err := registry.Pull(ctx, ref, dir, ropts...); err != nil {
		return "", err
	}
	return dir, nil
}

// runVerifyList prints the board verifications attached to the artifact at ref.
func runVerifyList(ctx context.Context, opts *globalOptions, f *verifyFlags, ref string) error {
	if f.run != "" || f.attest != "" || f.report != "" || f.out != "" {
		return usagef("--list takes only REF (and --trust, --plain-http, --insecure)")
	}
	ropts, err := f.options(ref)
	if err != nil {
		return err
	}
	tr, err := trustOptions(f.trust)
	if err != nil {
		return err
	}
	// Board verifications first: other attestations listed before them cannot push them past
	// Describe's bounds.
	ropts = append(append(ropts, tr...), registry.WithLogger(opts.logger), registry.WithPreferredPredicates(verify.PredicateType))
	d, err := registry.Describe(ctx, ref, ropts...)
	if err != nil {
		return err
	}
	vs := verify.Verifications(d)
	if opts.json {
		if vs == nil {
			vs = []verify.Verification{}
		}
		return json.NewEncoder(opts.stdout).Encode(vs)
	}
	fmt.Fprintf(opts.stdout, "%s\nboard verifications:\n", ref)
	if len(vs) == 0 {
		fmt.Fprintln(opts.stdout, "  none")
	}
	writeVerifications(opts.stdout, vs)
	if d.SkippedAttestations > 0 {
		fmt.Fprintf(opts.stdout, "  %d more attestations listed, not fetched (beyond the first 64, or 64 MiB of envelopes)\n", d.SkippedAttestations)
	}
	return nil
}

// writeVerifications prints the board verifications attached to an artifact (verify.Verifications):
// which board host verified it, with which run binary and shared objects, and the result. It is what
// `describe` should print under its attestations.
func writeVerifications(w io.Writer, vs []verify.Verification) {
	for _, v := range vs {
		status := "FAILED"
		switch {
		case v.Error != "":
			status = "INVALID: " + shown(v.Error)
		case v.OK:
			status = "passed"
		}
		fmt.Fprintf(w, "  %s board %q host %q: %s\n", v.Attestation, v.Board, v.Host, status)
		if v.Error != "" {
			continue
		}
		fmt.Fprintf(w, "    kernel %s, npu driver %s, fingerprint %s\n", shown(v.Kernel), shown(v.NPUDriver), shown(v.Fingerprint))
		if v.Command != "" {
			fmt.Fprintf(w, "    run %s\n    program %s", shown(v.Command), shown(v.Program))
			if v.PPL != 0 {
				fmt.Fprintf(w, ", PPL %.4f", v.PPL)
			}
			fmt.Fprintln(w)
			for _, o := range v.Objects {
				fmt.Fprintf(w, "      %-18s %s %s\n", shown(o.Role), shown(o.Digest), shown(o.Path))
			}
		}
	}
}
