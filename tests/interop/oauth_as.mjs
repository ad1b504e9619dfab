// The OAuth 2.1 authorization server of tests/it/oauth.rs: the certified `oidc-provider` library (9.13.3,
// installed by setup.sh into tests/interop/.oauth), configured, not mocked. Run with Node 22:
//
//   tests/interop/.node22/bin/node tests/interop/oauth_as.mjs CONFIG.json
//
// CONFIG.json (written by the test):
//   port            listen on 127.0.0.1:port; the issuer is http://127.0.0.1:port
//   resource        the MCP server's URL: the only resource indicator (RFC 8707) accepted; the JWT access
//                   tokens' `aud`
//   ttl             access token lifetime, seconds (client_credentials and refreshed tokens alike)
//   client_secret   the secret of client `edge-box-17` (client_secret_basic)
//   redirect_uri    the client's one redirect URI (authorization_code, for a scripted login)
//   rotate          true: every refresh rotates the refresh token (`rotateRefreshToken: true`); reusing a
//                   rotated one revokes the whole grant (oidc-provider's refresh_token grant does that)
//   jwks_file       the signing key (ES256), created on first start and reused, so a restarted server
//                   issues tokens the MCP server still verifies and still accepts those issued before
//   events_file     JSON lines appended for every token-endpoint request (see below); survives restarts
//
// Every request to the token endpoint appends one line to events_file, from the provider's own hooks:
//   {"t": ms, "ev": "token", "status": 200|400|401…, "grant_type", "outcome": "ok"|<error code>,
//    "description"?, "detail"? (the provider's reason, e.g. "refresh token already used"),
//    "presented_refresh_token"?, "access_token"?, "refresh_token"?, "expires_in"?}
// plus {"t", "ev": "grant.revoked", "grant_id"} whenever the provider revokes a grant (refresh token
// reuse). The tokens are written there so the test can look for them in the gateway's output.
// On start it prints "listening <issuer>" on stdout.

import { createHash, generateKeyPairSync } from 'node:crypto';
import { appendFileSync, existsSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const lib = join(here, '.oauth', 'node_modules', 'oidc-provider', 'lib', 'index.js');
const { default: Provider, errors } = await import(pathToFileURL(lib).href);

const cfg = JSON.parse(readFileSync(process.argv[2], 'utf8'));
const issuer = `http://127.0.0.1:${cfg.port}`;

function signingKey() {
  if (existsSync(cfg.jwks_file)) return JSON.parse(readFileSync(cfg.jwks_file, 'utf8'));
  const { privateKey } = generateKeyPairSync('ec', { namedCurve: 'P-256' });
  const jwk = privateKey.export({ format: 'jwk' });
  const thumb = createHash('sha256')
    .update(JSON.stringify({ crv: jwk.crv, kty: jwk.kty, x: jwk.x, y: jwk.y }))
    .digest('base64url');
  const key = { ...jwk, kid: thumb, alg: 'ES256', use: 'sig' };
  writeFileSync(cfg.jwks_file, JSON.stringify(key), { mode: 0o600 });
  return key;
}

function record(line) {
  appendFileSync(cfg.events_file, `${JSON.stringify({ t: Date.now(), ...line })}\n`);
}

const configuration = {
  clients: [{
    client_id: 'edge-box-17',
    client_secret: cfg.client_secret,
    token_endpoint_auth_method: 'client_secret_basic',
    grant_types: ['client_credentials', 'authorization_code', 'refresh_token'],
    response_types: ['code'],
    redirect_uris: [cfg.redirect_uri],
    scope: 'mcp:tools offline_access',
    id_token_signed_response_alg: 'ES256',
  }],
  jwks: { keys: [signingKey()] },
  scopes: ['openid', 'offline_access', 'mcp:tools'],
  features: {
    clientCredentials: { enabled: true },
    devInteractions: { enabled: true },
    resourceIndicators: {
      enabled: true,
      // A refresh (and the code exchange) asks for the resource the grant was given for.
      useGrantedResource: async () => true,
      async getResourceServerInfo(_ctx, indicator) {
        if (indicator !== cfg.resource) throw new errors.InvalidTarget(`unknown resource ${indicator}`);
        return {
          scope: 'mcp:tools',
          audience: cfg.resource,
          accessTokenTTL: cfg.ttl,
          accessTokenFormat: 'jwt',
          jwt: { sign: { alg: 'ES256' } },
        };
      },
    },
  },
  ttl: {
    AccessToken: cfg.ttl,
    ClientCredentials: cfg.ttl,
    AuthorizationCode: 60,
    Interaction: 600,
    Session: 3600,
    Grant: 24 * 3600,
    RefreshToken: 24 * 3600,
  },
  // A refresh token for every code exchange by a client allowed the refresh_token grant (the default
  // wants `offline_access` granted, which the resource-bound consent does not carry).
  issueRefreshToken: async (_ctx, client) => client.grantTypeAllowed('refresh_token'),
  // The provider's own interactions are enough for a scripted login.
  findAccount: async (_ctx, sub) => ({ accountId: sub, claims: async () => ({ sub }) }),
};
if (cfg.rotate === true) configuration.rotateRefreshToken = true;
const provider = new Provider(issuer, configuration);

// Every token-endpoint request, as the provider answered it (its own Koa app, outermost middleware).
provider.use(async (ctx, next) => {
  await next();
  if (ctx.method !== 'POST' || ctx.path !== '/token') return;
  const body = typeof ctx.body === 'object' && ctx.body !== null ? ctx.body : {};
  const line = {
    ev: 'token',
    status: ctx.status,
    grant_type: ctx.oidc?.params?.grant_type,
    outcome: ctx.status === 200 ? 'ok' : (body.error ?? `http_${ctx.status}`),
  };
  if (body.error_description) line.description = body.error_description;
  if (ctx.state.detail) line.detail = ctx.state.detail;
  const presented = ctx.oidc?.params?.refresh_token;
  if (presented) line.presented_refresh_token = presented;
  if (body.access_token) line.access_token = body.access_token;
  if (body.refresh_token) line.refresh_token = body.refresh_token;
  if (body.expires_in) line.expires_in = body.expires_in;
  record(line);
});
provider.on('grant.error', (ctx, err) => { ctx.state.detail = err.error_detail; });
provider.on('grant.revoked', (_ctx, grantId) => record({ ev: 'grant.revoked', grant_id: grantId }));
provider.on('server_error', (_ctx, err) => console.error('server_error', err));

const server = provider.listen(cfg.port, '127.0.0.1', () => {
  console.log(`listening ${issuer}`);
});
const stop = () => server.close(() => process.exit(0));
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
