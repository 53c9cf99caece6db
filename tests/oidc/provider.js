// A real OpenID provider for the sign-in tests: panva's oidc-provider (OpenID
// Certified), on a loopback port the system picks, printed as "listening <port>".
//
// CLIENTS_FILE holds the registered clients; ACCOUNTS_FILE maps a login to its claims
// (email, name, groups) and is read again at every sign-in, so a test takes a group
// away "at the provider" by rewriting it. The built-in development login form
// (devInteractions) accepts any password for a known login: what is tested is the
// relying party, not how the provider checks passwords.
import fs from 'node:fs';
import http from 'node:http';

import Provider from 'oidc-provider';

const clients = JSON.parse(fs.readFileSync(process.env.CLIENTS_FILE, 'utf8'));
const accountsFile = process.env.ACCOUNTS_FILE;

function accountClaims(id) {
  const accounts = JSON.parse(fs.readFileSync(accountsFile, 'utf8'));
  return Object.hasOwn(accounts, id) ? accounts[id] : undefined;
}

const server = http.createServer();
server.listen(0, '127.0.0.1', () => {
  const { port } = server.address();
  const provider = new Provider(`http://127.0.0.1:${port}`, {
    clients,
    // The dev keystore's key and these cookie keys are public: loopback tests only.
    cookies: { keys: ['harness-test-provider-cookie-key'] },
    claims: {
      openid: ['sub'],
      email: ['email', 'email_verified'],
      profile: ['name', 'preferred_username'],
      groups: ['groups'],
    },
    // Every client must prove PKCE, confidential ones too: the relying party is
    // expected to send a code challenge, and a code without its verifier is refused.
    pkce: { required: () => true },
    features: { devInteractions: { enabled: true } },
    async findAccount(ctx, id) {
      const claims = accountClaims(id);
      if (claims === undefined) return undefined;
      return { accountId: id, claims: async () => ({ sub: id, email_verified: true, ...claims }) };
    },
    // First-party clients only: consent is implied, as a company's own provider does for
    // its own applications, so a sign-in is the login form and nothing else.
    async loadExistingGrant(ctx) {
      const existing = ctx.oidc.result?.consent?.grantId || ctx.oidc.session.grantIdFor(ctx.oidc.client.clientId);
      if (existing) return ctx.oidc.provider.Grant.find(existing);
      const grant = new ctx.oidc.provider.Grant({ clientId: ctx.oidc.client.clientId, accountId: ctx.oidc.session.accountId });
      grant.addOIDCScope(ctx.oidc.requestParamScopes ? [...ctx.oidc.requestParamScopes].join(' ') : 'openid');
      await grant.save();
      return grant;
    },
  });
  server.on('request', provider.callback());
  console.log(`listening ${port}`);
});

for (const signal of ['SIGTERM', 'SIGINT']) {
  process.on(signal, () => server.close(() => process.exit(0)));
}
