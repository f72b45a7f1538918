package orchestrator

import (
	"errors"
	"net"
	"syscall"

	"google.golang.org/protobuf/proto"

	xctv1 "github.com/xct-dev/xct/gen/xct/v1"
	"github.com/xct-dev/xct/internal/wire"
	"github.com/xct-dev/xct/lctl/xctevent"
)

// bytesPerToken is the size estimate of one token of a prompt: about four
// bytes of English or JSON for the tokenizers of today's chat models. It
// only sizes an estimate the chain marks as one.
const bytesPerToken = 4

// failedCallTokens is what a failed model call is charged: what its
// endpoint reported (me.Usage), or, when it reported nothing and may have
// taken the call (its deadline passed while the endpoint worked on it, an
// answer cut short, a connection lost after the request left), an
// estimate marked Estimated: the last call whose usage was reported (the
// request only grows: the same history and more), its input at least the
// request's size in tokens. An endpoint bills a call it read whether or
// not its caller lives to read the answer; charging nothing let a run
// pass its budgets (a crew's timed-out primary, every step). nil when the
// call provably was not taken: never sent (refused connection, no peer),
// or refused by the endpoint with an error status (which it does not
// bill). The estimate errs towards stopping, as the takeover's count of
// lost calls does (chargeUnrecorded).
func (r *run) failedCallTokens(err error, req *xctv1.ProposeRequest) *xctevent.Tokens {
	var me *ModelError
	if errors.As(err, &me) && me.Usage != nil {
		return &xctevent.Tokens{Input: me.Usage.GetInputTokens(), Output: me.Usage.GetOutputTokens()}
	}
	if callNotTaken(err) {
		return nil
	}
	est := xctevent.Tokens{Input: r.lastCall.Input, Output: r.lastCall.Output, Estimated: true}
	if size := int64((proto.Size(req) + bytesPerToken - 1) / bytesPerToken); size > est.Input {
		est.Input = size
	}
	return &est
}

// callNotTaken reports whether a failed model call provably never reached
// its endpoint's model: the request was never sent (the connection was
// refused, the name did not resolve, no transport carried it), or the
// endpoint answered an error status other than a timeout (it refused the
// call: a bad key, a malformed request, a rate limit).
func callNotTaken(err error) bool {
	var me *ModelError
	if errors.As(err, &me) {
		if me.NotSent {
			return true
		}
		if me.Status != 0 && me.Code != wire.CodeTimeout {
			return true
		}
	}
	var dns *net.DNSError
	return errors.Is(err, syscall.ECONNREFUSED) || errors.As(err, &dns)
}

// noteCall remembers what a call that answered reported using: the
// estimate of a later call that fails without a usage starts from it.
func (r *run) noteCall(t xctevent.Tokens) {
	if t.Input > 0 || t.Output > 0 {
		r.lastCall = xctevent.Tokens{Input: t.Input, Output: t.Output}
	}
}

// callEstimate is what a model call of the run now is taken to use when
// no answer says: the last call's use, its input at least the size of the
// request the run would send (a crew's: its history and goal alone).
func (r *run) callEstimate() xctevent.Tokens {
	est := xctevent.Tokens{Input: r.lastCall.Input, Output: r.lastCall.Output, Estimated: true}
	req := &xctv1.ProposeRequest{RunId: r.id, Goal: r.goal, Tools: r.tools, History: r.transcript.history(), Instructions: instructions}
	if size := int64((proto.Size(req) + bytesPerToken - 1) / bytesPerToken); size > est.Input {
		est.Input = size
	}
	return est
}
