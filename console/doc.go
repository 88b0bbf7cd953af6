// Package console is jingwei's review console: a small web server, on a
// loopback address by default, where a reviewer sees the calls awaiting
// review as they arrive, reads everything the session log and the recovery
// worker know about each, signs a verdict with the console's reviewer key,
// and asks for a retry plan (`jingwei console`).
//
// # What it shows
//
//   - / : the calls awaiting review (jw.api.status), live: a small script
//     listens to /live (Server-Sent Events) and refreshes the list when
//     the recovery worker's state, the session logs or the reviews change,
//     without a reload. Each call shows its tool, arguments, contract,
//     attempts, the chain of its events from the session log, the
//     assessment and why, and the reviews on record. The open calls (no
//     result yet) are listed under it.
//   - /call?session=S&call=C : one call, with the same details, the form to
//     sign a decision on it and the button that asks for a retry plan.
//   - /sessions, /session?session=S : the sessions and one session's log.
//   - /plans : every retry plan in jw_plans, issued or consumed.
//
// # Roles
//
// The console acts through two NATS connections, given to it in
// [Config]: one as the reviewer role (it publishes the signed reviews on
// jw.reviews.<session> and asks jw.api.status and jw.api.inspect) and one
// as the host role (it reads the streams and jw_plans and asks
// jw.api.prepare). It holds no other credentials, so it can do nothing
// those roles cannot: the NATS server enforces it, not the console.
//
// # Decisions
//
// A decision is a signed statement about one call. The one kind there is
// is the review (verdict not_executed, completed or uncertain, with the
// operator and the evidence): the console signs it with [Config.Key] and
// submits it as `jingwei review` does (service.Client.SubmitReview), then
// shows whether the recovery worker accepted it or ignores it, and why
// (the refusal code). Asking for a plan goes through jw.api.prepare; the
// page shows the plan, or the refusal code and its reason. The recovery
// worker decides both; the console only asks.
//
// # Safety of the pages
//
// Everything that comes from the bus (tool arguments above all, which an
// agent controls) is rendered through html/template, which escapes it for
// its context; no page has inline script, and every response carries a
// Content-Security-Policy that allows only the console's own script and
// style. A POST must come from the console's own pages: the request's
// Host must be one the console answers to (a guard against DNS
// rebinding), the browser's Sec-Fetch-Site / Origin must be same-origin
// (net/http's CrossOriginProtection), and the form must carry the CSRF
// token bound to the browser's console cookie. Request bodies are bounded
// (MaxFormBytes). After a POST the browser is redirected (303) to the
// call's page, which shows the outcome once.
package console
