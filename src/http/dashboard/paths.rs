//! The dashboard's paths: every route it serves and the ones open without a credential, for the
//! router, the API-key check and the browser guards (which must not import the screens).

/// Every route of the dashboard, as matched by the router.
pub const ROUTES: &[&str] = &[
    "/",
    "/events",
    "/events/bulk",
    "/events/{id}",
    "/events/{id}/replay",
    "/events/{id}/cancel",
    "/send",
    "/runs",
    "/runs/bulk",
    "/runs/{id}",
    "/runs/{id}/retry",
    "/runs/{id}/cancel",
    "/jobs",
    "/jobs/{id}/pause",
    "/jobs/{id}/resume",
    "/endpoints",
    "/endpoints/{id}/index",
    "/endpoints/{id}/remove",
    "/webhooks",
    "/workers",
    "/webhook-sources",
    "/webhook-sources/{id}",
    "/webhook-sources/{id}/test",
    "/webhook-sources/{id}/deliveries/{delivery}/replay",
    "/login",
    "/logout",
    "/assets/{file}",
];

/// Dashboard routes open without a credential: the login form and the static assets.
pub const PUBLIC_ROUTES: &[&str] = &["/login", "/assets/{file}"];

/// Whether `route` (a matched route pattern) belongs to the dashboard.
pub fn is_route(route: &str) -> bool {
    ROUTES.contains(&route)
}

/// Whether `route` is a dashboard route open without a credential.
pub fn is_public_route(route: &str) -> bool {
    PUBLIC_ROUTES.contains(&route)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn public_routes_are_dashboard_routes() {
        assert!(ROUTES.iter().all(|r| !is_public_route(r) || is_route(r)));
    }
}
