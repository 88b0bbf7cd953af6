// jingwei review console: the person's own key, in this browser. The
// console holds no signing key: a review or an approval is signed here,
// with WebCrypto Ed25519, by a key made here (never extractable) or
// imported from the nkey seed ("SU…") `jingwei keys new` writes, and kept
// in this browser's IndexedDB for this console's origin. The page sends
// the signed JSON; the console checks it and relays it.
//
// The signed bytes are the ones the Go side verifies (recovery.VerifyReview,
// recovery.VerifyApproval, docs/protocol.md §6.3): the RFC 8785 form of the
// review or approval without "sig", with "signer" set to the public key as
// an nkey ("U…"). Every value here is a string or the integer v, so RFC
// 8785 is: members sorted by UTF-16 code units, strings as JSON.stringify
// writes them, no white space.
(function () {
  "use strict";

  // --- nkeys: base32 (RFC 4648, no padding) with a prefix byte and CRC16.
  var B32 = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
  var PREFIX_SEED = 18 << 3, PREFIX_USER = 20 << 3;
  function b32encode(bytes) {
    var out = "", bits = 0, val = 0;
    for (var i = 0; i < bytes.length; i++) {
      val = (val << 8) | bytes[i];
      bits += 8;
      while (bits >= 5) { out += B32[(val >>> (bits - 5)) & 31]; bits -= 5; }
    }
    if (bits > 0) out += B32[(val << (5 - bits)) & 31];
    return out;
  }
  function b32decode(s) {
    var out = [], bits = 0, val = 0;
    for (var i = 0; i < s.length; i++) {
      var c = B32.indexOf(s[i]);
      if (c < 0) throw new Error("not base32: " + s[i]);
      val = ((val << 5) | c) & 0xffff;
      bits += 5;
      if (bits >= 8) { out.push((val >>> (bits - 8)) & 255); bits -= 8; }
    }
    return new Uint8Array(out);
  }
  // crc16 is the CRC-16/XMODEM nkeys appends (little endian).
  function crc16(bytes) {
    var crc = 0;
    for (var i = 0; i < bytes.length; i++) {
      crc ^= bytes[i] << 8;
      for (var j = 0; j < 8; j++) crc = (crc & 0x8000) ? ((crc << 1) ^ 0x1021) & 0xffff : (crc << 1) & 0xffff;
    }
    return crc;
  }
  function withCRC(raw) {
    var c = crc16(raw), out = new Uint8Array(raw.length + 2);
    out.set(raw);
    out[raw.length] = c & 255;
    out[raw.length + 1] = c >>> 8;
    return out;
  }
  // publicNKey encodes a 32-byte Ed25519 public key as a user nkey "U…".
  function publicNKey(pub) {
    var raw = new Uint8Array(33);
    raw[0] = PREFIX_USER;
    raw.set(pub, 1);
    return b32encode(withCRC(raw));
  }
  // seedOf decodes a user seed "SU…" (the first one in text: a bare seed
  // or a decorated .nk/.creds file) into its 32 bytes.
  function seedOf(text) {
    var m = /SU[A-Z2-7]{56}/.exec(text || "");
    if (!m) throw new Error("no nkey user seed (SU… 58 characters) in what you pasted");
    var b = b32decode(m[0]);
    if (b.length !== 36) throw new Error("the seed has the wrong length");
    var body = b.subarray(0, 34), c = crc16(body);
    if (b[34] !== (c & 255) || b[35] !== (c >>> 8)) throw new Error("the seed's checksum is wrong (a typo?)");
    var prefix = ((b[0] & 7) << 5) | ((b[1] & 0xf8) >> 3);
    if ((b[0] & 0xf8) !== PREFIX_SEED || prefix !== PREFIX_USER) throw new Error("not a user seed (want SU…)");
    return b.slice(2, 34);
  }
  function b64urlDecode(s) {
    s = s.replace(/-/g, "+").replace(/_/g, "/");
    var bin = atob(s + "===".slice((s.length + 3) % 4)), out = new Uint8Array(bin.length);
    for (var i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
    return out;
  }
  function b64url(buf) {
    var bytes = new Uint8Array(buf), bin = "";
    for (var i = 0; i < bytes.length; i++) bin += String.fromCharCode(bytes[i]);
    return btoa(bin).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
  }

  // --- the key, kept in IndexedDB (a non-extractable CryptoKey).
  var DB = "jingwei-console", STORE = "keys", ME = "me";
  function db() {
    return new Promise(function (res, rej) {
      var r = indexedDB.open(DB, 1);
      r.onupgradeneeded = function () { r.result.createObjectStore(STORE); };
      r.onsuccess = function () { res(r.result); };
      r.onerror = function () { rej(r.error); };
    });
  }
  function tx(mode, f) {
    return db().then(function (d) {
      return new Promise(function (res, rej) {
        var t = d.transaction(STORE, mode), req = f(t.objectStore(STORE));
        t.oncomplete = function () { res(req && req.result); };
        t.onerror = function () { rej(t.error); };
      });
    });
  }
  function load() { return tx("readonly", function (s) { return s.get(ME); }); }
  function save(k) { return tx("readwrite", function (s) { return s.put(k, ME); }); }
  function forget() { return tx("readwrite", function (s) { return s.delete(ME); }); }

  var ED = { name: "Ed25519" };
  function makeKey() {
    return crypto.subtle.generateKey(ED, false, ["sign", "verify"]).then(function (kp) {
      return crypto.subtle.exportKey("raw", kp.publicKey).then(function (pub) {
        return { priv: kp.privateKey, pub: publicNKey(new Uint8Array(pub)), made: true };
      });
    });
  }
  // importSeed imports a seed as a non-extractable key; its public key is
  // read once from an extractable copy that is dropped at once.
  function importSeed(text) {
    var seed = seedOf(text);
    var pkcs8 = new Uint8Array(48);
    pkcs8.set([0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22, 0x04, 0x20]);
    pkcs8.set(seed, 16);
    return crypto.subtle.importKey("pkcs8", pkcs8, ED, true, ["sign"])
      .then(function (k) { return crypto.subtle.exportKey("jwk", k); })
      .then(function (jwk) {
        var pub = publicNKey(b64urlDecode(jwk.x));
        return crypto.subtle.importKey("pkcs8", pkcs8, ED, false, ["sign"]).then(function (priv) {
          pkcs8.fill(0);
          return { priv: priv, pub: pub, made: false };
        });
      });
  }

  // --- what the console knows: the trusted keys and their names.
  function trusted(role) {
    var list = document.getElementById("trusted-keys"), out = { knows: false, names: {} };
    if (!list) return out;
    out.knows = list.getAttribute("data-knows-" + role + "s") === "true";
    list.querySelectorAll('li[data-role="' + role + '"]').forEach(function (li) {
      out.names[li.getAttribute("data-key")] = li.textContent;
    });
    return out;
  }
  function nameOf(role, pub) {
    var t = trusted(role);
    return Object.prototype.hasOwnProperty.call(t.names, pub) ? t.names[pub] : null;
  }

  // --- the panel.
  function el(id) { return document.getElementById(id); }
  function showError(msg) {
    var e = el("key-error");
    if (!e) return;
    e.textContent = msg || "";
    e.hidden = !msg;
  }
  function render(me) {
    var none = el("mykey-none"), have = el("mykey-have"), panel = el("mykey");
    if (!panel) return;
    if (!me) {
      none.hidden = false; have.hidden = true;
      el("mykey-state").textContent = "No signing key in this browser yet: make one, or import your seed. Your reviews and approvals are signed here with it; the console holds none.";
      panel.classList.remove("untrusted");
      return;
    }
    none.hidden = true; have.hidden = false;
    el("my-pub").textContent = me.pub;
    var rv = trusted("reviewer"), ap = trusted("approver");
    var rn = nameOf("reviewer", me.pub), an = nameOf("approver", me.pub);
    var inR = rv.knows && Object.prototype.hasOwnProperty.call(rv.names, me.pub);
    var inA = ap.knows && Object.prototype.hasOwnProperty.call(ap.names, me.pub);
    el("my-name").textContent = rn || an || "";
    var parts = [], line = " To be trusted, an administrator adds the line “" + me.pub + " <your name>” to the trust file.";
    if (inR) parts.push("a trusted reviewer");
    if (inA) parts.push("a trusted approver");
    var untrusted = !parts.length && rv.knows;
    var msg;
    if (parts.length) msg = "Your key is " + parts.join(" and ") + ".";
    else if (rv.knows && ap.knows) msg = "NOT a trusted reviewer or approver key: what you sign with it is refused." + line;
    else if (rv.knows) msg = "NOT a trusted reviewer key: reviews signed with it are refused." + line;
    else if (ap.knows) msg = "Not a trusted approver key (answers signed with it are refused); the console does not know the trusted reviewers: the recovery worker judges your reviews.";
    else msg = "The console does not know the trusted keys: the recovery worker and the tool workers judge what you sign.";
    el("my-trust").textContent = msg;
    el("mykey-state").textContent = me.made ? "Your key was made in this browser and cannot be exported; to sign on the command line too, make a key with jingwei keys new and import its seed instead." : "Your key was imported from your seed.";
    panel.classList.toggle("untrusted", untrusted);
  }
  // refresh shows the stored key; the panel carries data-ready once it
  // shows what this browser holds.
  function refresh() {
    return load().then(render, function (e) { showError("cannot read your key: " + e); })
      .then(function () { el("mykey").setAttribute("data-ready", "1"); });
  }

  function supported() {
    return window.crypto && crypto.subtle && window.indexedDB;
  }

  document.addEventListener("DOMContentLoaded", function () {
    if (!el("mykey")) return;
    if (!supported()) { showError("this browser has no WebCrypto or IndexedDB here: sign with jingwei review/approve --key FILE instead"); return; }
    el("key-new").addEventListener("click", function () {
      showError("");
      makeKey().then(save).then(refresh).catch(function (e) { showError("cannot make a key (does this browser support Ed25519?): " + e); });
    });
    el("key-import").addEventListener("click", function () {
      showError("");
      var input = el("key-seed");
      Promise.resolve().then(function () { return importSeed(input.value); })
        .then(save).then(function () { input.value = ""; return refresh(); })
        .catch(function (e) { showError("cannot import the seed: " + (e && e.message || e)); });
    });
    el("key-forget").addEventListener("click", function () {
      showError("");
      forget().then(refresh);
    });
    refresh();
  });

  // --- signing a decision: the form's fields become the signed JSON in
  // its "signed" field, then the form is posted.
  function canon(v) {
    if (v === null || typeof v !== "object") return JSON.stringify(v);
    if (Array.isArray(v)) return "[" + v.map(canon).join(",") + "]";
    return "{" + Object.keys(v).sort().map(function (k) { return JSON.stringify(k) + ":" + canon(v[k]); }).join(",") + "}";
  }
  function decision(form, me) {
    var f = form.elements, kind = form.getAttribute("data-kind");
    var checked = form.querySelector("input[name=choice]:checked");
    if (!checked) throw new Error("choose a " + (kind === "review" ? "verdict" : "answer"));
    var role = kind === "review" ? "reviewer" : "approver";
    var who = f.operator.value.trim() || nameOf(role, me.pub) || "";
    if (!who) throw new Error("say who you are (your key has no name in the console's trust file)");
    var evidence = f.evidence.value.trim();
    if (!evidence) throw new Error(kind === "review" ? "say what you checked (evidence)" : "give a reason");
    var at = new Date().toISOString().replace(/\.\d+Z$/, "Z");
    var session = f.session.value, call = f.call.value;
    if (kind === "review") {
      return { v: 1, session: session, call_id: call, operator: who, evidence: evidence, verdict: checked.value, at: at, signer: me.pub };
    }
    return { v: 1, session: session, call_id: call, decision: checked.value, approver: who, reason: evidence, at: at, signer: me.pub };
  }
  document.addEventListener("submit", function (e) {
    var form = e.target;
    if (!form.matches || !form.matches("form.decide")) return;
    e.preventDefault();
    var err = form.querySelector(".sign-error");
    function fail(x) { if (err) { err.textContent = "Not signed: " + (x && x.message || x); err.hidden = false; } }
    if (!supported()) { fail("this browser cannot sign here"); return; }
    load().then(function (me) {
      if (!me) throw new Error("no key in this browser: make one or import your seed under “Your key” above");
      var d = decision(form, me);
      return crypto.subtle.sign(ED, me.priv, new TextEncoder().encode(canon(d))).then(function (sig) {
        d.sig = b64url(sig);
        form.elements.signed.value = JSON.stringify(d);
        form.submit();
      });
    }).catch(fail);
  });

  // For tests: the canonical form and the nkey encodings.
  window.jingweiSign = { canon: canon, publicNKey: publicNKey, seedOf: seedOf };
})();
