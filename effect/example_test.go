package effect_test

import (
	"fmt"

	"github.com/jingwei/jingwei/effect"
)

func ExampleMetadata_WithEffect() {
	orders := effect.Metadata{Name: "orders.create"}.WithEffect(effect.Idempotent, "orders-v1")
	charge := effect.Metadata{Name: "payments.charge"}.WithEffect(effect.NonIdempotent, "pay-v1")
	undeclared := effect.Metadata{Name: "mystery.tool"}

	for _, m := range []effect.Metadata{orders, charge, undeclared} {
		fmt.Printf("%s: %s, retry an uncertain call without review: %v\n", m.Name, m.Contract.Effect, m.Contract.Effect.Safe())
	}
	// Output:
	// orders.create: idempotent, retry an uncertain call without review: true
	// payments.charge: non_idempotent, retry an uncertain call without review: false
	// mystery.tool: unknown, retry an uncertain call without review: false
}
