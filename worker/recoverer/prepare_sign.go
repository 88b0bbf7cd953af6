package recoverer

import (
	"bytes"
	"crypto/ed25519"
	"encoding/json"

	"github.com/nats-io/nkeys"

	"github.com/jingwei/jingwei/recovery"
	"github.com/jingwei/jingwei/schema"
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

// verifyStored is recovery.VerifyPlan(p, trusted) for a plan read from
// jw_plans, made cheaper for the plans this recoverer's own planner key
// signs — in a fleet whose recovery workers share the planner key, every
// plan they issue. Ed25519 signatures are deterministic: a key signs a
// payload to exactly one signature. So when p names the planner key as
// its signer (and that key is trusted), p's payload is signed again and
// the result compared with p's signature; equal, p carries a valid
// signature of a trusted key. A signature costs about half of a
// verification. own, when not nil, is a plan this prepare signed for the
// same call: a stored plan with the same signature and the same JSON is
// that plan, and needs no signing at all. Anything else (another
// planner's plan, a signer whose signatures are randomized, a forgery) is
// verified in full, with VerifyPlan's errors.
func verifyStored(planner nkeys.KeyPair, trusted recovery.TrustedKeys, p schema.Plan, own *schema.Plan) error {
	k, ok := planner.(*plannerKey)
	if ok && k.priv != nil && p.Sig != "" && p.Signer == k.pub && trusted.Has(k.pub) {
		if own != nil && own.Sig == p.Sig && own.Signer == p.Signer && samePlan(*own, p) {
			return nil
		}
		if again, err := recovery.SignPlan(k, p); err == nil && again.Sig == p.Sig {
			return nil
		}
	}
	return recovery.VerifyPlan(p, trusted)
}

// samePlan reports whether a and b encode to the same JSON.
func samePlan(a, b schema.Plan) bool {
	ja, err := json.Marshal(a)
	if err != nil {
		return false
	}
	jb, err := json.Marshal(b)
	return err == nil && bytes.Equal(ja, jb)
}
