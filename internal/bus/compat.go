package bus

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// MinServerVersion is the oldest NATS server the farm runs on (measured
// with `make compat`, docs/RELIABILITY.md). The learner's consumer pins one
// client through a priority group, which 2.10 and older drop without a
// word (two learners would then archive and shard the same trajectories);
// on 2.11.0 and 2.11.1 the consumers that follow a run over several filter
// subjects never see the trajectories workers stored, so no run completes.
const MinServerVersion = "2.11.2"

// ServerTooOldError refuses a NATS server older than MinServerVersion.
type ServerTooOldError struct {
	Server, Found, Required string
}

func (e *ServerTooOldError) Error() string {
	return fmt.Sprintf("NATS server %s runs nats-server %s; a2farm needs %s or newer",
		e.Server, e.Found, e.Required)
}

// CheckServer refuses the connected server when it is older than
// MinServerVersion; every role calls it before touching the topology.
func CheckServer(nc *nats.Conn) error {
	found := nc.ConnectedServerVersion()
	if !versionAtLeast(found, MinServerVersion) {
		server := nc.ConnectedUrlRedacted()
		if name := nc.ConnectedServerName(); name != "" {
			server = fmt.Sprintf("%s (%s)", server, name)
		}
		return &ServerTooOldError{Server: server, Found: found, Required: MinServerVersion}
	}
	return nil
}

// versionAtLeast compares dotted release versions ("2.10.27",
// "2.12.0-RC.1" counts as 2.12.0); an unreadable version is too old.
func versionAtLeast(have, want string) bool {
	h, okH := parseVersion(have)
	w, okW := parseVersion(want)
	if !okH || !okW {
		return false
	}
	for i := range h {
		if h[i] != w[i] {
			return h[i] > w[i]
		}
	}
	return true
}

func parseVersion(v string) ([3]int, bool) {
	var out [3]int
	v = strings.TrimPrefix(v, "v")
	if i := strings.IndexAny(v, "-+"); i >= 0 {
		v = v[:i]
	}
	parts := strings.Split(v, ".")
	if len(parts) != 3 {
		return out, false
	}
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 {
			return out, false
		}
		out[i] = n
	}
	return out, true
}

// Permanent reports whether a JetStream or connection error will not go
// away by waiting: the server does not support what was asked, refuses it
// as invalid, or the account may not do it. Everything else (no
// responders, timeouts, a lost or closed connection, a cluster electing a
// leader) is transient, and callers wait it out.
func Permanent(err error) bool {
	if err == nil {
		return false
	}
	for _, perm := range []error{
		jetstream.ErrConsumerMultipleFilterSubjectsNotSupported, jetstream.ErrJetStreamNotEnabled,
		jetstream.ErrJetStreamNotEnabledForAccount,
		nats.ErrPermissionViolation, nats.ErrAuthorization, nats.ErrAuthExpired, nats.ErrAuthRevoked,
		nats.ErrAccountAuthExpired, nats.ErrMaxPayload, nats.ErrBadSubject, nats.ErrHeadersNotSupported,
	} {
		if errors.Is(err, perm) {
			return true
		}
	}
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		// 400: a bad or unsupported request; 403: not permitted. 404
		// (a stream a restarting cluster has not recovered yet), 408, 409
		// and 5xx (JetStream busy, no leader yet) can pass, except what
		// the server says it does not support.
		return apiErr.Code == 400 || apiErr.Code == 403 || strings.Contains(apiErr.Description, "not supported")
	}
	return false
}
