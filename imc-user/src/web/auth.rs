//! Basic auth for `imc serve`, built so that no flood of wrong passwords delays the scraper:
//!
//! - credentials that verified are remembered, as exporter-toolkit does (its cache key is the
//!   user, the stored hash and the password together): here as a SHA-256 digest of the three,
//!   never the password itself, compared in constant time ([`subtle`]). A scraper that sends
//!   the same credentials every time pays for bcrypt once, and a remembered check never waits
//!   for a bcrypt slot;
//! - credentials that failed are remembered too (exporter-toolkit caches both outcomes of
//!   bcrypt under that key, web/handler.go): a client that keeps sending the same wrong
//!   password is answered 401 at once, with no bcrypt and nothing taken from its address's
//!   budget, so such a flood cannot hold a scraper that shares the address (one host, a NAT)
//!   and whose credentials imc has not verified yet (its first scrape, after a restart or a
//!   change of users);
//! - the rest (new credentials, wrong passwords, unknown users, which cost the same check
//!   against a stand-in hash so the time taken does not tell which users exist) go through
//!   bcrypt at most [`BCRYPT_AT_ONCE`] at a time, and one at a time per client address (an
//!   IPv6 client by its /64): a client's further attempts while one is checked, and its
//!   attempts beyond a budget of [`BURST`] refilled at [`REFILL_PER_S`] a second, are answered
//!   429 at once with no bcrypt at all. A flood costs at most one bcrypt at a time per address.
use base64::Engine;
use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::net::IpAddr;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Instant;
use subtle::ConstantTimeEq;

/// Bcrypt checks at once, all clients together (each takes tens of milliseconds of a CPU at
/// cost 10).
pub const BCRYPT_AT_ONCE: usize = 2;
/// Checks a client address may have made in a row before it is held to [`REFILL_PER_S`].
pub const BURST: f64 = 5.0;
/// Checks a second a client address earns back.
pub const REFILL_PER_S: f64 = 1.0;
/// Verified credentials remembered (a scraper or two, a person with curl).
const REMEMBERED: usize = 64;
/// Failed credentials remembered (oldest forgotten first): more than a misconfigured client or
/// two ever send.
const FAILED: usize = 1024;
/// Client addresses tracked before those with a full budget are forgotten.
const TRACKED: usize = 4096;
/// A bcrypt hash of no password anyone sends (cost 10, the usual one): what an unknown user's
/// password is checked against, so that it takes as long as a known user's.
const STAND_IN_HASH: &str = "$2b$10$CwTycUXWue0Thq9StjUM0uJ8.Yy9Ri7CQXDQvMLxgnjV.7mcF3gd6";

/// What a request's credentials amount to.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    Allowed,
    Denied,
    /// This client address has a check running or has spent its budget: try later.
    TooMany,
}

struct Budget {
    tokens: f64,
    at: Instant,
    checking: bool,
}

pub struct Auth {
    users: RwLock<Arc<BTreeMap<String, String>>>,
    remembered: Mutex<Vec<[u8; 32]>>,
    failed: Mutex<Failed>,
    clients: Mutex<HashMap<IpAddr, Budget>>,
    bcrypt: tokio::sync::Semaphore,
}

/// Digests of credentials that failed, at most [`FAILED`], the oldest forgotten first.
#[derive(Default)]
struct Failed {
    set: HashSet<[u8; 32]>,
    order: VecDeque<[u8; 32]>,
}

impl Failed {
    fn insert(&mut self, key: [u8; 32]) {
        if !self.set.insert(key) {
            return;
        }
        if self.order.len() >= FAILED
            && let Some(old) = self.order.pop_front()
        {
            self.set.remove(&old);
        }
        self.order.push_back(key);
    }
}

/// `Authorization: Basic base64(user:password)`, split.
pub fn credentials(value: &[u8]) -> Option<(String, String)> {
    let v = std::str::from_utf8(value).ok()?;
    let (scheme, b64) = v.trim().split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let raw = base64::engine::general_purpose::STANDARD
        .decode(b64.trim())
        .ok()?;
    let text = String::from_utf8(raw).ok()?;
    let (user, password) = text.split_once(':')?;
    Some((user.to_string(), password.to_string()))
}

/// The address a client's budget is kept under: IPv4 as it is (IPv4-mapped IPv6 as IPv4), IPv6
/// by its /64 (one host usually has a whole /64 to pick addresses from).
pub fn client_key(ip: IpAddr) -> IpAddr {
    match ip.to_canonical() {
        IpAddr::V6(v6) => {
            let mut o = v6.octets();
            o[8..].fill(0);
            IpAddr::from(o)
        }
        v4 => v4,
    }
}

/// SHA-256 of user, hash and password, each length-prefixed so no two triples collide.
fn digest(user: &str, hash: &str, password: &str) -> [u8; 32] {
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    for part in [user, hash, password] {
        ctx.update(&(part.len() as u64).to_le_bytes());
        ctx.update(part.as_bytes());
    }
    let mut out = [0u8; 32];
    out.copy_from_slice(ctx.finish().as_ref());
    out
}

impl Auth {
    pub fn new(users: BTreeMap<String, String>) -> Auth {
        Auth {
            users: RwLock::new(Arc::new(users)),
            remembered: Mutex::new(Vec::new()),
            failed: Mutex::new(Failed::default()),
            clients: Mutex::new(HashMap::new()),
            bcrypt: tokio::sync::Semaphore::new(BCRYPT_AT_ONCE),
        }
    }

    /// The users of a configuration read again (what was remembered of old hashes can no longer
    /// match: the hash is part of what is remembered).
    pub fn set_users(&self, users: BTreeMap<String, String>) {
        *self.users.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(users);
        self.remembered
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
        *self.failed.lock().unwrap_or_else(|p| p.into_inner()) = Failed::default();
    }

    /// Whether anyone needs to authenticate.
    pub fn enabled(&self) -> bool {
        !self.users().is_empty()
    }

    fn users(&self) -> Arc<BTreeMap<String, String>> {
        self.users.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Whether these credentials verified before: every remembered digest is compared, in
    /// constant time, whatever matches.
    fn remembered(&self, key: &[u8; 32]) -> bool {
        let list = self.remembered.lock().unwrap_or_else(|p| p.into_inner());
        let mut found = subtle::Choice::from(0);
        for d in list.iter() {
            found |= d.ct_eq(key);
        }
        found.into()
    }

    /// Whether these credentials failed before (the digest, not the password, is kept: a
    /// lookup's timing tells nothing of the password).
    fn failed_before(&self, key: &[u8; 32]) -> bool {
        self.failed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .set
            .contains(key)
    }

    fn remember(&self, key: [u8; 32]) {
        let mut list = self.remembered.lock().unwrap_or_else(|p| p.into_inner());
        if list.len() >= REMEMBERED {
            list.remove(0);
        }
        list.push(key);
    }

    /// Takes a check from `client`'s budget, or says it has none (a check running, or the
    /// budget spent).
    fn take(&self, client: IpAddr, now: Instant) -> bool {
        let mut clients = self.clients.lock().unwrap_or_else(|p| p.into_inner());
        if clients.len() >= TRACKED && !clients.contains_key(&client) {
            clients.retain(|_, b| {
                b.checking
                    || b.tokens + now.duration_since(b.at).as_secs_f64() * REFILL_PER_S < BURST
            });
        }
        let b = clients.entry(client).or_insert(Budget {
            tokens: BURST,
            at: now,
            checking: false,
        });
        b.tokens = (b.tokens + now.duration_since(b.at).as_secs_f64() * REFILL_PER_S).min(BURST);
        b.at = now;
        if b.checking || b.tokens < 1.0 {
            return false;
        }
        b.tokens -= 1.0;
        b.checking = true;
        true
    }

    /// Ends `client`'s check; one that verified is given back (only failures are limited).
    fn done(&self, client: IpAddr, ok: bool) {
        let mut clients = self.clients.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(b) = clients.get_mut(&client) {
            b.checking = false;
            if ok {
                b.tokens = (b.tokens + 1.0).min(BURST);
            }
        }
    }

    /// Checks the `Authorization` header value `given` of a request from `peer`.
    pub async fn check(&self, given: Option<&[u8]>, peer: IpAddr) -> Verdict {
        let users = self.users();
        if users.is_empty() {
            return Verdict::Allowed;
        }
        let Some((user, password)) = given.and_then(credentials) else {
            return Verdict::Denied;
        };
        let known = users.get(&user);
        let hash = known.map_or(STAND_IN_HASH, String::as_str).to_string();
        let key = digest(&user, &hash, &password);
        if known.is_some() && self.remembered(&key) {
            return Verdict::Allowed;
        }
        if self.failed_before(&key) {
            return Verdict::Denied;
        }
        let client = client_key(peer);
        if !self.take(client, Instant::now()) {
            return Verdict::TooMany;
        }
        let ok = match self.bcrypt.acquire().await {
            Ok(_permit) => tokio::task::spawn_blocking(move || {
                bcrypt::verify(password.as_bytes(), &hash).unwrap_or(false)
            })
            .await
            .unwrap_or(false),
            Err(_) => false,
        };
        let ok = ok && known.is_some();
        self.done(client, ok);
        if ok {
            self.remember(key);
            Verdict::Allowed
        } else {
            self.failed
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(key);
            Verdict::Denied
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn basic(user: &str, password: &str) -> Vec<u8> {
        format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"))
        )
        .into_bytes()
    }

    fn auth() -> Auth {
        let mut users = BTreeMap::new();
        users.insert("prometheus".to_string(), bcrypt::hash("right", 4).unwrap());
        Auth::new(users)
    }

    fn rt() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    }

    const HOME: IpAddr = IpAddr::V4(std::net::Ipv4Addr::LOCALHOST);

    #[test]
    fn basic_credentials_are_decoded() {
        assert_eq!(
            credentials(b"Basic cHJvbWV0aGV1czpzM2NyZXQ6eA=="),
            Some(("prometheus".to_string(), "s3cret:x".to_string()))
        );
        assert_eq!(credentials(b"Bearer abc"), None);
        assert_eq!(credentials(b"Basic !!!"), None);
    }

    #[test]
    fn the_stand_in_hash_is_a_cost_10_bcrypt_hash() {
        let parts: bcrypt::HashParts = STAND_IN_HASH.parse().unwrap();
        assert_eq!(parts.get_cost(), 10);
        // A real check (an error would return at once and tell an unknown user apart).
        assert_eq!(bcrypt::verify("", STAND_IN_HASH).ok(), Some(false));
    }

    #[test]
    fn verified_credentials_are_remembered_and_need_no_budget() {
        let a = auth();
        rt().block_on(async {
            let good = basic("prometheus", "right");
            assert_eq!(a.check(Some(&good), HOME).await, Verdict::Allowed);
            // The address spends its whole budget on wrong passwords…
            let mut denied = 0;
            while a
                .check(Some(&basic("prometheus", &format!("wrong{denied}"))), HOME)
                .await
                == Verdict::Denied
            {
                denied += 1;
            }
            assert_eq!(denied, BURST as usize);
            let bad = basic("prometheus", "another");
            assert_eq!(a.check(Some(&bad), HOME).await, Verdict::TooMany);
            // …and the remembered credentials still pass, without bcrypt.
            assert_eq!(a.check(Some(&good), HOME).await, Verdict::Allowed);
            // Another address has its own budget.
            let other: IpAddr = "10.1.2.3".parse().unwrap();
            assert_eq!(a.check(Some(&bad), other).await, Verdict::Denied);
            // Unknown users, no header: denied.
            let nobody = basic("nobody", "right");
            assert_eq!(a.check(Some(&nobody), other).await, Verdict::Denied);
            assert_eq!(a.check(None, other).await, Verdict::Denied);
        });
    }

    #[test]
    fn a_repeated_wrong_password_spends_no_budget_so_new_right_credentials_pass() {
        // A flood of one wrong password from one address (localhost, a NAT) spends none of
        // the address's budget, so a scraper imc has not verified yet (its first scrape, a
        // restart) is not answered 429 while the flood lasts.
        let a = auth();
        rt().block_on(async {
            let bad = basic("prometheus", "wrong");
            for _ in 0..10 * BURST as usize {
                assert_eq!(a.check(Some(&bad), HOME).await, Verdict::Denied);
            }
            let good = basic("prometheus", "right");
            assert_eq!(a.check(Some(&good), HOME).await, Verdict::Allowed);
            // What failed stays failed, and a changed user list forgets it.
            assert_eq!(a.check(Some(&bad), HOME).await, Verdict::Denied);
            let mut users = BTreeMap::new();
            users.insert("prometheus".to_string(), bcrypt::hash("wrong", 4).unwrap());
            a.set_users(users);
            assert_eq!(a.check(Some(&bad), HOME).await, Verdict::Allowed);
        });
    }

    #[test]
    fn failed_credentials_are_remembered_up_to_a_bound() {
        let mut f = Failed::default();
        for i in 0..FAILED as u32 + 10 {
            let mut k = [0u8; 32];
            k[..4].copy_from_slice(&i.to_le_bytes());
            f.insert(k);
            f.insert(k);
        }
        assert_eq!(f.set.len(), FAILED);
        assert_eq!(f.order.len(), FAILED);
        assert!(!f.set.contains(&[0u8; 32]), "the oldest is forgotten");
    }

    #[test]
    fn a_changed_hash_forgets_what_was_remembered() {
        let a = auth();
        rt().block_on(async {
            let good = basic("prometheus", "right");
            assert_eq!(a.check(Some(&good), HOME).await, Verdict::Allowed);
            let mut users = BTreeMap::new();
            users.insert("prometheus".to_string(), bcrypt::hash("new", 4).unwrap());
            a.set_users(users);
            assert_eq!(a.check(Some(&good), HOME).await, Verdict::Denied);
            let new = basic("prometheus", "new");
            assert_eq!(a.check(Some(&new), HOME).await, Verdict::Allowed);
            a.set_users(BTreeMap::new());
            assert!(!a.enabled());
            assert_eq!(a.check(None, HOME).await, Verdict::Allowed);
        });
    }

    #[test]
    fn one_check_at_a_time_per_address_and_the_budget_refills() {
        let a = auth();
        let t0 = Instant::now();
        assert!(a.take(HOME, t0));
        // A second check while the first runs: refused.
        assert!(!a.take(HOME, t0));
        a.done(HOME, false);
        for _ in 1..BURST as usize {
            assert!(a.take(HOME, t0));
            a.done(HOME, false);
        }
        assert!(!a.take(HOME, t0), "budget spent");
        assert!(a.take(HOME, t0 + Duration::from_secs_f64(1.0 / REFILL_PER_S)));
    }

    #[test]
    fn ipv6_clients_are_kept_by_their_64() {
        let a: IpAddr = "2001:db8:1:2:aaaa::1".parse().unwrap();
        let b: IpAddr = "2001:db8:1:2:bbbb::9".parse().unwrap();
        assert_eq!(client_key(a), client_key(b));
        assert_ne!(
            client_key(a),
            client_key("2001:db8:1:3::1".parse().unwrap())
        );
        let mapped: IpAddr = "::ffff:10.0.0.1".parse().unwrap();
        assert_eq!(client_key(mapped), "10.0.0.1".parse::<IpAddr>().unwrap());
    }
}
