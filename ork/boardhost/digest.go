package boardhost

import (
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/zeebo/blake3"
)

const digestPrefix = "blake3:"

// FileDigest is the BLAKE3 of a file as read at one moment.
type FileDigest struct {
	Role   string `json:"role,omitempty"` // "pack", "stub" or "text" in a run
	Path   string `json:"path"`
	Digest string `json:"digest"` // "blake3:<64 hex>"
	Size   int64  `json:"size"`
}

// hashFile streams path through BLAKE3, checking ctx between chunks. The size is what was read,
// not what stat said.
func hashFile(ctx context.Context, path string) (FileDigest, error) {
	f, err := os.Open(path)
	if err != nil {
		return FileDigest{}, err
	}
	defer f.Close()
	h := blake3.New()
	buf := make([]byte, 1<<20)
	var n int64
	for {
		if err := ctx.Err(); err != nil {
			return FileDigest{}, fmt.Errorf("hashing %s: %w", path, err)
		}
		k, rerr := f.Read(buf)
		if k > 0 {
			h.Write(buf[:k])
			n += int64(k)
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			return FileDigest{}, fmt.Errorf("hashing %s: %w", path, rerr)
		}
	}
	return FileDigest{Path: path, Digest: digestPrefix + hex.EncodeToString(h.Sum(nil)), Size: n}, nil
}

// sumBytes returns "blake3:<hex>" of b.
func sumBytes(b []byte) string {
	s := blake3.Sum256(b)
	return digestPrefix + hex.EncodeToString(s[:])
}

// validDigest reports whether s is "blake3:" followed by 64 lowercase hex digits.
func validDigest(s string) bool {
	hexPart, ok := strings.CutPrefix(s, digestPrefix)
	if !ok || len(hexPart) != 64 {
		return false
	}
	for _, c := range hexPart {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}
