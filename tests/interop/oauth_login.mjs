// A person's one-time login at oauth_as.mjs, scripted: the authorization_code grant with PKCE (S256) and
// an RFC 8707 resource, driven through oidc-provider's own login and consent pages over plain HTTP
// (cookies kept by hand), then the code exchanged at the token endpoint (client_secret_basic).
// tests/it/oauth.rs seeds the gateway's token file with the answer, as `mcp-edge login` would.
//
//   node oauth_login.mjs ISSUER CLIENT_ID CLIENT_SECRET REDIRECT_URI RESOURCE SCOPE
//
// Prints one JSON object: the token endpoint's answer plus {"issuer", "token_endpoint"}. Exits 1 with a
// message on stderr when any step does not go as the protocol says.

import { createHash, randomBytes } from 'node:crypto';

const [issuer, clientId, secret, redirectUri, resource, scope] = process.argv.slice(2);
const fail = (msg) => {
  console.error(`oauth_login: ${msg}`);
  process.exit(1);
};

const meta = await (await fetch(`${issuer}/.well-known/oauth-authorization-server`)).json();
if (meta.issuer !== issuer) fail(`metadata issuer ${meta.issuer} is not ${issuer}`);

const jar = new Map();
async function go(url, init = {}) {
  const headers = { ...(init.headers ?? {}) };
  if (jar.size) headers.cookie = [...jar].map(([k, v]) => `${k}=${v}`).join('; ');
  const res = await fetch(new URL(url, issuer), { ...init, headers, redirect: 'manual' });
  for (const c of res.headers.getSetCookie()) {
    const [pair] = c.split(';');
    const i = pair.indexOf('=');
    jar.set(pair.slice(0, i).trim(), pair.slice(i + 1));
  }
  return res;
}
const location = (res, what) => {
  if (res.status < 300 || res.status > 399) fail(`${what}: HTTP ${res.status}, expected a redirect`);
  return new URL(res.headers.get('location'), issuer).href;
};

const verifier = randomBytes(32).toString('base64url');
const challenge = createHash('sha256').update(verifier).digest('base64url');
const state = randomBytes(16).toString('base64url');
const auth = new URL(meta.authorization_endpoint);
for (const [k, v] of Object.entries({
  client_id: clientId,
  response_type: 'code',
  redirect_uri: redirectUri,
  scope,
  resource,
  state,
  code_challenge: challenge,
  code_challenge_method: 'S256',
})) auth.searchParams.set(k, v);

let next = location(await go(auth.href), 'authorization request');
let code;
for (let step = 0; step < 10 && !code; step += 1) {
  if (next.startsWith(redirectUri)) {
    const back = new URL(next);
    if (back.searchParams.get('error')) fail(`authorization refused: ${back.search}`);
    if (back.searchParams.get('state') !== state) fail('state mismatch');
    if (back.searchParams.get('iss') !== issuer) fail(`iss ${back.searchParams.get('iss')} is not ${issuer}`);
    code = back.searchParams.get('code');
    break;
  }
  if (new URL(next).pathname.startsWith('/interaction/')) {
    const page = await (await go(next)).text();
    const prompt = page.includes('name="prompt" value="login"') ? 'login' : 'consent';
    const form = new URLSearchParams({ prompt });
    if (prompt === 'login') {
      form.set('login', 'operator');
      form.set('password', 'any');
    }
    next = location(await go(next, {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
      body: form.toString(),
    }), `${prompt} form`);
  } else {
    next = location(await go(next), `GET ${next}`);
  }
}
if (!code) fail('no code after the interactions');

const basic = Buffer.from(`${encodeURIComponent(clientId)}:${encodeURIComponent(secret)}`).toString('base64');
const res = await fetch(meta.token_endpoint, {
  method: 'POST',
  headers: { authorization: `Basic ${basic}`, 'content-type': 'application/x-www-form-urlencoded' },
  body: new URLSearchParams({
    grant_type: 'authorization_code', code, code_verifier: verifier, redirect_uri: redirectUri, resource,
  }).toString(),
});
const tokens = await res.json();
if (res.status !== 200) fail(`code exchange: HTTP ${res.status} ${JSON.stringify(tokens)}`);
if (!tokens.refresh_token) fail('no refresh token issued');
console.log(JSON.stringify({ ...tokens, issuer, token_endpoint: meta.token_endpoint }));
