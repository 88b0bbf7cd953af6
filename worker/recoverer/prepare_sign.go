package recoverer

import (
	"crypto/ed25519"

	"github.com/nats-io/nkeys"
)

// plannerKey is the planner key pair with its ed25519 private key and its
// public key derived once. An nkeys key pair keeps only the seed and
// derives both again for every Sign and PublicKey call (SHA-512 and a
// scalar multiplication each time): in a profile of racing prepares that
// was a quarter of the recoverer's CPU in Prepare. Signatures are the
// same bytes (ed25519 is deterministic); every other method is the
// wrapped key pair's.
type plannerKey struct {
	nkeys.KeyPair
	pub  string
	priv ed25519.PrivateKey
}

// cachePlannerKey returns kp with its keys derived once, or kp itself when
// they cannot be (a key pair without a seed, or not a user key: SignPlan
// then reports that as before).
func cachePlannerKey(kp nkeys.KeyPair) nkeys.KeyPair {
	if kp == nil {
		return nil
	}
	seed, err := kp.Seed()
	if err != nil {
		return kp
	}
	prefix, raw, err := nkeys.DecodeSeed(seed)
	if err != nil || prefix != nkeys.PrefixByteUser || len(raw) != ed25519.SeedSize {
		return kp
	}
	pub, err := kp.PublicKey()
	if err != nil {
		return kp
	}
	return &plannerKey{KeyPair: kp, pub: pub, priv: ed25519.NewKeyFromSeed(raw)}
}

// PublicKey returns the public key derived at construction.
func (k *plannerKey) PublicKey() (string, error) { return k.pub, nil }

// Sign signs input with the private key derived at construction; after
// Wipe it is the wrapped key pair's Sign (an error).
func (k *plannerKey) Sign(input []byte) ([]byte, error) {
	if k.priv == nil {
		return k.KeyPair.Sign(input)
	}
	return ed25519.Sign(k.priv, input), nil
}

// Wipe wipes the derived private key and the wrapped key pair.
func (k *plannerKey) Wipe() {
	clear(k.priv)
	k.priv = nil
	k.KeyPair.Wipe()
}
