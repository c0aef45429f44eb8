package cluster

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
)

// ErrNoEncryption: key operations need a member started with a gossip key
// (memberlist cannot turn encryption on in a running member).
var ErrNoEncryption = errors.New("gossip encryption is off: start every member with --gossip-key to manage keys")

// Key rotation without a partition, on every member in turn:
//
//  1. InstallKey(new): members now accept both keys, still send with old.
//  2. UseKey(new): members send with new; all of them accept it already.
//  3. RemoveKey(old): once every member uses new.
//
// The control API (`swdctl gossip-key ... --cluster`) runs each step on
// every member before the next.

// InstallKey adds a key that incoming gossip may be encrypted with.
func (c *Cluster) InstallKey(key []byte) error {
	kr := c.keyring
	if kr == nil {
		return ErrNoEncryption
	}
	if err := kr.AddKey(key); err != nil {
		return fmt.Errorf("install gossip key: %w", err)
	}
	return nil
}

// UseKey makes an installed key the one outgoing gossip is encrypted with.
func (c *Cluster) UseKey(key []byte) error {
	kr := c.keyring
	if kr == nil {
		return ErrNoEncryption
	}
	if err := kr.UseKey(key); err != nil {
		return fmt.Errorf("use gossip key: %w", err)
	}
	return nil
}

// RemoveKey removes an installed key that is not the primary one.
func (c *Cluster) RemoveKey(key []byte) error {
	kr := c.keyring
	if kr == nil {
		return ErrNoEncryption
	}
	if err := kr.RemoveKey(key); err != nil {
		return fmt.Errorf("remove gossip key: %w", err)
	}
	return nil
}

// KeyFingerprints lists the installed keys as short SHA-256 fingerprints
// (never the keys), the primary one first.
func (c *Cluster) KeyFingerprints() ([]string, error) {
	kr := c.keyring
	if kr == nil {
		return nil, ErrNoEncryption
	}
	var out []string
	for _, k := range kr.GetKeys() { // primary first
		out = append(out, Fingerprint(k))
	}
	return out, nil
}

// Fingerprint is a key's short public identifier: the first 8 bytes of its
// SHA-256, in hex.
func Fingerprint(key []byte) string {
	sum := sha256.Sum256(key)
	return hex.EncodeToString(sum[:8])
}
