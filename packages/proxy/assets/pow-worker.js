// Rampart's bot challenge solver, run in a Web Worker by the challenge page (rampart_waf.lua).
// Message in: { t: token, d: difficulty in leading zero bits, s: first counter, k: step }.
// It hashes t + n for n = s, s + k, s + 2k, ... and posts { p: hashes } as it goes and { n } once
// SHA-256(t + n) starts with d zero bits. Web Crypto does the hashing where the page may use it
// (a secure context: HTTPS or localhost); elsewhere (a plain-HTTP site) the SHA-256 below does.
// No double quote and no closing script tag in this file: the page embeds it as it is.
'use strict';

var K = new Int32Array([
  0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
  0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
  0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
  0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
  0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
  0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
  0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
  0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
]);
var W = new Int32Array(64);
var H = new Int32Array(8);
var M = new Uint8Array(1024);

// SHA-256 of an ASCII string (the token and a counter: nothing else is hashed) into H.
function sha256(s) {
  var len = s.length;
  var blocks = (len + 9 + 63) >> 6;
  var i, j, b;
  M.fill(0, 0, blocks * 64);
  for (i = 0; i < len; i++) M[i] = s.charCodeAt(i);
  M[len] = 0x80;
  var bits = len * 8;
  M[blocks * 64 - 4] = bits >>> 24;
  M[blocks * 64 - 3] = bits >>> 16;
  M[blocks * 64 - 2] = bits >>> 8;
  M[blocks * 64 - 1] = bits;
  var h0 = 0x6a09e667, h1 = 0xbb67ae85 | 0, h2 = 0x3c6ef372, h3 = 0xa54ff53a | 0;
  var h4 = 0x510e527f, h5 = 0x9b05688c | 0, h6 = 0x1f83d9ab, h7 = 0x5be0cd19;
  for (b = 0; b < blocks; b++) {
    for (i = 0, j = b * 64; i < 16; i++, j += 4) W[i] = (M[j] << 24) | (M[j + 1] << 16) | (M[j + 2] << 8) | M[j + 3];
    for (i = 16; i < 64; i++) {
      var x = W[i - 15], y = W[i - 2];
      var s0 = ((x >>> 7) | (x << 25)) ^ ((x >>> 18) | (x << 14)) ^ (x >>> 3);
      var s1 = ((y >>> 17) | (y << 15)) ^ ((y >>> 19) | (y << 13)) ^ (y >>> 10);
      W[i] = (W[i - 16] + s0 + W[i - 7] + s1) | 0;
    }
    var a = h0, c = h2, d = h3, e = h4, f = h5, g = h6, h = h7, bb = h1;
    for (i = 0; i < 64; i++) {
      var S1 = ((e >>> 6) | (e << 26)) ^ ((e >>> 11) | (e << 21)) ^ ((e >>> 25) | (e << 7));
      var t1 = (h + S1 + ((e & f) ^ (~e & g)) + K[i] + W[i]) | 0;
      var S0 = ((a >>> 2) | (a << 30)) ^ ((a >>> 13) | (a << 19)) ^ ((a >>> 22) | (a << 10));
      var t2 = (S0 + ((a & bb) ^ (a & c) ^ (bb & c))) | 0;
      h = g; g = f; f = e; e = (d + t1) | 0; d = c; c = bb; bb = a; a = (t1 + t2) | 0;
    }
    h0 = (h0 + a) | 0; h1 = (h1 + bb) | 0; h2 = (h2 + c) | 0; h3 = (h3 + d) | 0;
    h4 = (h4 + e) | 0; h5 = (h5 + f) | 0; h6 = (h6 + g) | 0; h7 = (h7 + h) | 0;
  }
  H[0] = h0; H[1] = h1; H[2] = h2; H[3] = h3; H[4] = h4; H[5] = h5; H[6] = h6; H[7] = h7;
  return H;
}

function wordZeroBits(words) {
  var bits = 0;
  for (var i = 0; i < words.length; i++) {
    if (words[i] !== 0) return bits + Math.clz32(words[i]);
    bits += 32;
  }
  return bits;
}

function byteZeroBits(bytes) {
  var bits = 0;
  for (var i = 0; i < bytes.length; i++) {
    if (bytes[i] !== 0) return bits + Math.clz32(bytes[i]) - 24;
    bits += 8;
  }
  return bits;
}

var BATCH = 256;
var PROGRESS = 4096;

async function withWebCrypto(t, d, n, k) {
  var enc = new TextEncoder();
  for (;;) {
    var pending = [];
    for (var i = 0; i < BATCH; i++) pending.push(crypto.subtle.digest('SHA-256', enc.encode(t + (n + i * k))));
    var digests = await Promise.all(pending);
    for (var j = 0; j < BATCH; j++) {
      if (byteZeroBits(new Uint8Array(digests[j])) >= d) return n + j * k;
    }
    n += BATCH * k;
    postMessage({ p: BATCH });
  }
}

function withScript(t, d, n, k) {
  for (var tried = 1; ; tried++, n += k) {
    if (wordZeroBits(sha256(t + n)) >= d) return n;
    if (tried % PROGRESS === 0) postMessage({ p: PROGRESS });
  }
}

if (typeof onmessage !== 'undefined' || typeof WorkerGlobalScope !== 'undefined') {
  onmessage = async function (e) {
    var m = e.data;
    var subtle = self.isSecureContext && self.crypto && crypto.subtle;
    postMessage({ n: subtle ? await withWebCrypto(m.t, m.d, m.s, m.k) : withScript(m.t, m.d, m.s, m.k), webCrypto: !!subtle });
  };
}
