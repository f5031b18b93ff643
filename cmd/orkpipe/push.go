package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/spf13/cobra"

	"orkpipe/artifacts"
	"orkpipe/internal/units"
	"orkpipe/registry"
	"orkpipe/registry/oci"
)

// transportFlags are the registry connection flags shared by push, pull and describe.
type transportFlags struct {
	plainHTTP bool
	insecure  bool
}

func (f *transportFlags) register(cmd *cobra.Command) {
	cmd.Flags().BoolVar(&f.plainHTTP, "plain-http", false, "use plain HTTP (no TLS) for the registry named in REF")
	cmd.Flags().BoolVar(&f.insecure, "insecure", false, "allow plain HTTP to any registry and skip TLS certificate checks")
}

// options turns the flags into registry options for ref.
func (f *transportFlags) options(ref string) ([]registry.Option, error) {
	var out []registry.Option
	if f.plainHTTP {
		r, err := name.ParseReference(ref)
		if err != nil {
			return nil, usagef("reference %q: %v", ref, err)
		}
		out = append(out, registry.WithPlainHTTP(r.Context().RegistryStr()))
	}
	if f.insecure {
		out = append(out, registry.WithInsecure())
	}
	return out, nil
}

// pushChunkSize is the PATCH size of push's chunked uploads; a blob larger than it goes chunked
// (resumable). A variable for tests: TestPushResumeCLI pushes a pack of a few MiB in chunks (the
// child processes it starts take it from $ORKPIPE_TEST_PUSH_CHUNK, see TestMain).
var pushChunkSize int64 = oci.DefaultChunkSize

type pushFlags struct {
	transportFlags
	rangeSize string
	sign      string
	compress  string
}

func newPushCommand(opts *globalOptions) *cobra.Command {
	var f pushFlags
	cmd := &cobra.Command{
		Use:   "push DIR REF",
		Short: "Push a build output directory (pack, stub, report, provenance) to an OCI registry",
		Long: `push publishes every file at the top of DIR as one ModelPack OCI artifact at REF, one layer per
file (see docs/oci.md): raw, or a tar archive where leaving a sparse file's holes out or
compressing (zstd) pays, so that oras and ModelPack clients get the files back. Clients that
extract no tar+zstd layer (modctl) need --compress never: raw and plain tar only. Each file is cut
into verification ranges (--range-size) that pull fetches in parallel and checks one by one.
Digests come from the cache (--cache): a build output is not hashed again. Files upload in
parallel (-j), large ones in resumable chunks: a push that was killed resumes each
blob from what the registry holds (sessions kept in the cache's uploads/ directory), and
two pushes of the same file to the same repository at once take turns (the second waits,
then finds it uploaded). With --sign KEY the build's provenance.json is
attached as a signed in-toto/SLSA attestation. The manifest digest is printed as the last line.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runPush(cmd.Context(), opts, &f, args[0], args[1])
		},
	}
	f.register(cmd)
	cmd.Flags().StringVar(&f.rangeSize, "range-size", "64MiB", "bytes per verification range (a power of two, at least 4MiB); part of the manifest")
	cmd.Flags().StringVar(&f.sign, "sign", "", "ed25519 private key file (from 'orkpipe key generate') to sign the provenance with")
	cmd.Flags().StringVar(&f.compress, "compress", string(registry.CompressAuto), "auto: a file whose data compresses below 90% and saves at least 1 MiB travels as tar+zstd; never: raw and plain tar layers only (for modctl and other clients that extract no tar+zstd)")
	return cmd
}

func runPush(ctx context.Context, opts *globalOptions, f *pushFlags, dir, ref string) error {
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		return usagef("DIR %q: not a directory", dir)
	}
	ropts, err := f.options(ref)
	if err != nil {
		return err
	}
	rs, err := units.ParseSize(f.rangeSize)
	if err != nil {
		return usagef("--range-size: %v", err)
	}
	if !registry.ValidRangeSize(rs) {
		return usagef("--range-size: %s is not a power of two of at least %s", f.rangeSize, units.FormatSize(registry.MinRangeSize))
	}
	comp, err := registry.ParseCompression(f.compress)
	if err != nil {
		return usagef("--compress: %v", err)
	}
	store, err := openCacheStore(opts)
	if err != nil {
		return err
	}
	defer store.Close()
	ropts = append(ropts, registry.WithJobs(opts.jobs), registry.WithLogger(opts.logger), registry.WithRangeSize(rs),
		registry.WithAnnotator(registry.PackAnnotator), registry.WithDigests(store), registry.WithCompression(comp),
		registry.WithUploadState(filepath.Join(store.Dir(), artifacts.UploadsDir)), registry.WithUploadMode(oci.UploadAuto, pushChunkSize))
	if f.sign != "" {
		key, err := registry.LoadPrivateKey(f.sign)
		if err != nil {
			return fmt.Errorf("--sign: %w", err)
		}
		ropts = append(ropts, registry.WithSigner(key))
	}
	prog := newTransferProgress(opts, "push")
	ropts = append(ropts, registry.WithProgress(prog))
	res, err := registry.Push(ctx, dir, ref, ropts...)
	prog.wait()
	if err != nil {
		return err
	}
	if opts.json {
		type file struct {
			Name   string `json:"name"`
			Form   string `json:"form"` // raw, tar or tar+zstd (docs/oci.md)
			Size   int64  `json:"size"`
			Stored int64  `json:"stored"`
			SHA256 string `json:"sha256"`
		}
		files := []file{}
		for _, f := range res.Artifact.Files {
			files = append(files, file{Name: f.Name, Form: string(f.Form), Size: f.Digests.Size, Stored: f.StoredSize(), SHA256: f.Digests.SHA256})
		}
		out := map[string]any{"digest": res.Digest.String(), "ref": ref, "uploaded": res.Uploaded, "reused": res.Reused, "files": files}
		if res.Attestation != nil {
			out["attestation"] = res.Attestation.String()
		}
		return json.NewEncoder(opts.stdout).Encode(out)
	}
	var zstdFiles int
	for _, file := range res.Artifact.Files {
		fmt.Fprintf(opts.stdout, "%-28s %10s  %-8s %10s stored  %s\n", file.Name, units.FormatSize(file.Digests.Size), file.Form, units.FormatSize(file.StoredSize()), file.Digests.SHA256)
		if file.Form == registry.FormTarZstd {
			zstdFiles++
		}
	}
	if zstdFiles > 0 {
		fmt.Fprintf(opts.stderr, "note: %d file(s) travel as tar+zstd layers (ModelPack media types); clients that extract no tar+zstd layer (modctl) cannot pull this artifact: push with --compress never for them\n", zstdFiles)
	}
	fmt.Fprintf(opts.stdout, "uploaded %s, already present %s\n", units.FormatSize(res.Uploaded), units.FormatSize(res.Reused))
	if res.Attestation != nil {
		fmt.Fprintf(opts.stdout, "signed provenance %s\n", res.Attestation)
	}
	fmt.Fprintln(opts.stdout, res.Digest)
	return nil
}
