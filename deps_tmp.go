// Temporary: pins the dependencies until every package imports its own.
package jingwei
import (
 _ "github.com/nats-io/nats.go"
 _ "github.com/nats-io/nats.go/jetstream"
 _ "github.com/nats-io/nats.go/micro"
 _ "github.com/nats-io/nats-server/v2/server"
 _ "github.com/nats-io/nkeys"
 _ "github.com/cenkalti/backoff/v4"
 _ "github.com/rs/zerolog"
 _ "github.com/gowebpki/jcs"
 _ "github.com/santhosh-tekuri/jsonschema/v6"
)
