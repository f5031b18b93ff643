package registry

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
)

// Key files are PEM: the private key as "PRIVATE KEY" (PKCS #8), the public key as "PUBLIC KEY"
// (PKIX), both ed25519. GenerateKeyFiles writes KEYFILE with mode 0600 and KEYFILE.pub with 0644.

// KeyID names a public key: "SHA256:" + hex of the sha256 of its PKIX DER encoding.
func KeyID(pub ed25519.PublicKey) string {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil { // only fails for unsupported key types; ed25519 is supported
		return "invalid"
	}
	sum := sha256.Sum256(der)
	return "SHA256:" + hex.EncodeToString(sum[:])
}

// GenerateKeyFiles creates a new ed25519 key pair at path (private, 0600) and path+".pub". It never
// overwrites an existing file.
func GenerateKeyFiles(path string) (ed25519.PublicKey, error) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		return nil, err
	}
	pubDER, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return nil, err
	}
	if _, err := os.Lstat(path + ".pub"); err == nil {
		return nil, fmt.Errorf("%s.pub: %w", path, os.ErrExist)
	}
	if err := writeNew(path, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		return nil, err
	}
	if err := writeNew(path+".pub", pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER}), 0o644); err != nil {
		os.Remove(path)
		return nil, err
	}
	return pub, nil
}

func writeNew(path string, b []byte, mode os.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		os.Remove(path)
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		os.Remove(path)
		return fmt.Errorf("sync %s: %w", path, err)
	}
	return f.Close()
}

// ParsePrivateKey decodes a PEM "PRIVATE KEY" (PKCS #8) ed25519 key.
func ParsePrivateKey(b []byte) (ed25519.PrivateKey, error) {
	blk, _ := pem.Decode(b)
	if blk == nil || blk.Type != "PRIVATE KEY" {
		return nil, fmt.Errorf("%w: want a PEM \"PRIVATE KEY\" block", ErrInvalidKey)
	}
	k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidKey, err)
	}
	priv, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("%w: private key is %T, want ed25519", ErrInvalidKey, k)
	}
	return priv, nil
}

// ParsePublicKey decodes a PEM "PUBLIC KEY" (PKIX) ed25519 key.
func ParsePublicKey(b []byte) (ed25519.PublicKey, error) {
	blk, _ := pem.Decode(b)
	if blk == nil || blk.Type != "PUBLIC KEY" {
		return nil, fmt.Errorf("%w: want a PEM \"PUBLIC KEY\" block", ErrInvalidKey)
	}
	k, err := x509.ParsePKIXPublicKey(blk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidKey, err)
	}
	pub, ok := k.(ed25519.PublicKey)
	if !ok {
		return nil, fmt.Errorf("%w: public key is %T, want ed25519", ErrInvalidKey, k)
	}
	return pub, nil
}

// LoadPrivateKey reads a private key file; it refuses one readable by group or others.
func LoadPrivateKey(path string) (ed25519.PrivateKey, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if st.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("%s: %w: mode %v, want 0600 (private key readable by others)", path, ErrInvalidKey, st.Mode().Perm())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	k, err := ParsePrivateKey(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return k, nil
}

// LoadPublicKey reads a public key file.
func LoadPublicKey(path string) (ed25519.PublicKey, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	k, err := ParsePublicKey(b)
	if err != nil {
		if errors.Is(err, ErrInvalidKey) {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		return nil, err
	}
	return k, nil
}
