// Package console is jingwei's review console: a small web server, on a
// loopback address by default, where a reviewer sees the calls awaiting
// review as they arrive, reads everything the session log and the recovery
// worker know about each, signs a verdict with their own key in their
// browser, and asks for a retry plan; and where an approver sees the calls
// waiting for approval and approves or denies them the same way (`jingwei
// console`). The console holds no signing key: it checks and relays what
// people signed.
//
// # What it shows
//
//   - / : the calls waiting for approval and the calls awaiting review
//     (jw.api.status), live: a small script
//     listens to /live (Server-Sent Events) and refreshes the list when
//     the recovery worker's state, the session logs or the reviews change,
//     without a reload. Each call shows its tool, arguments, contract,
//     attempts, the chain of its events from the session log, the
//     assessment and why, and the reviews on record. A call waiting for
//     approval shows its tool, arguments, task, deadline and events. The
//     open calls (no result yet) are listed under them.
//   - /call?session=S&call=C : one call, with the same details, the form to
//     sign a decision on it and the button that asks for a retry plan.
//   - /sessions, /session?session=S : the sessions and one session's log.
//   - /plans : every retry plan in jw_plans, issued or consumed.
//   - /stopped : the stopped tasks (task, session, by host or budget,
//     reason, when).
//
// # Roles
//
// The console acts through two NATS connections, given to it in
// [Config]: one as the reviewer role (it publishes the signed reviews on
// jw.reviews.<session> and the signed answers on jw.approvals.<session>,
// and asks jw.api.status and jw.api.inspect) and one
// as the host role (it reads the streams and jw_plans and asks
// jw.api.prepare). It holds no other credentials, so it can do nothing
// those roles cannot: the NATS server enforces it, not the console.
//
// # Decisions
//
// A decision is a signed statement about one call, made in one generic
// form (a choice, an operator, an evidence) and signed in the person's
// browser (static/sign.js): WebCrypto Ed25519 with a key made there (not
// extractable) or imported from the nkey seed `jingwei keys new` wrote,
// kept in the browser's IndexedDB; the public key is an nkey ("U…"). The
// browser signs the RFC 8785 form of the decision without sig
// (docs/protocol.md §6.3) and posts the signed JSON. Two kinds exist:
//
//   - the review of a call awaiting review (verdict not_executed,
//     completed or uncertain, with the operator and the evidence): the
//     console checks it (well formed, about this call, a non-blank
//     operator, a signature that verifies, a signer among
//     [Config.TrustedReviewers] when known) and submits it as `jingwei
//     review` does (service.Client.SubmitReview), then shows whether the
//     recovery worker accepted it or ignores it, and why (the refusal
//     code). A review that fails the checks is refused before anything
//     is published. When the call's body may still be running (evidence
//     no_result, timeout, cancelled) the page says what to do first:
//     fence its store, then check, then sign.
//   - the answer to a call waiting for approval (approved or denied, with
//     the approver and the reason): checked the same way
//     (recovery.VerifyApproval, [Config.TrustedApprovers]) and published
//     as `jingwei approve`/`deny` do (service.Client.SubmitApproval),
//     after checking on the session log that the call still waits (else
//     nothing is published). The tool worker judges it; the console reads
//     the session log for up to [Config.ApprovalWait] and shows
//     approval.granted, the call rejected at stage approval, or the
//     refusal (approval_pending when no outcome showed in time).
//
// Every review and approval on a page shows the name the trust file gives
// its signer ([Config.ReviewerNames], [Config.ApproverNames]); the
// operator or approver the person wrote is shown beside it, as written.
//
// Asking for a plan goes through jw.api.prepare; the page shows the plan,
// or the refusal code and its reason. The recovery worker and the tool
// workers decide; the console only asks.
//
// # Safety of the pages
//
// Every request but /login needs the login cookie, which /login?token=
// [Console.Token] sets (401 without it). Everything that comes from the
// bus (tool arguments above all, which an agent controls) is rendered
// through html/template, which escapes it for its context; no page has
// inline script, and every response carries a Content-Security-Policy
// that allows only the console's own scripts and style. A POST must come
// from the console's own pages: the request's Host must be one the
// console answers to (a guard against DNS rebinding), the browser's
// Sec-Fetch-Site / Origin must be same-origin (net/http's
// CrossOriginProtection) and one of them must be present (a script sends
// neither), and the form must carry the CSRF token bound to the login. Request bodies are bounded
// (MaxFormBytes). After a POST the browser is redirected (303) to the
// call's page, which shows the outcome once.
package console
