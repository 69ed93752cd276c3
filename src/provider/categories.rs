//! What each preset's provider is, for `hookgate providers payment`, and which
//! providers retry a failed delivery too little to be met with a sync route.

/// The category of a preset's provider: a word or two people search by.
pub fn category(preset: &str) -> &'static str {
    match preset {
        "adyen" | "adyen_platform" | "affirm" | "airwallex" | "authorize_net" | "bolt"
        | "braintree" | "brex" | "cashfree" | "chargebee" | "chargify" | "checkbook"
        | "checkout" | "circle" | "coinbase_commerce" | "coinify" | "dodopayments" | "dwolla"
        | "fastspring" | "gocardless" | "increase" | "lemonsqueezy" | "lithic" | "mercado_pago"
        | "modern_treasury" | "orb" | "paddle" | "paypal" | "paystack" | "pinwheel" | "plaid"
        | "pleo" | "polar" | "primer" | "quickbooks" | "razorpay" | "recurly" | "square"
        | "stripe" | "wise" | "worldline" | "xero" => "payments and finance",
        "aftership" | "bigcommerce" | "commercelayer" | "easypost" | "ebay" | "etsy"
        | "fourthwall" | "lob" | "loop_returns" | "onfleet" | "recharge" | "shippo" | "shopify"
        | "squarespace" | "woocommerce" => "commerce and shipping",
        "alchemy" | "bitbucket" | "buildkite" | "circleci" | "configcat" | "datadog"
        | "doppler" | "elevenlabs" | "falai" | "gitea" | "github" | "gitlab" | "grafana"
        | "heroku" | "keygen" | "launchdarkly" | "mongodb_atlas" | "mux" | "netlify"
        | "new_relic" | "npm" | "openai" | "port" | "render" | "replicate" | "sentry" | "snyk"
        | "sonatype" | "supabase" | "tailscale" | "terraform" | "vercel" | "gemini" => {
            "developer tools and infrastructure"
        }
        "ably" | "airship" | "discord" | "front" | "knock" | "line" | "messagebird" | "meta"
        | "msteams" | "plivo" | "pusher" | "sendbird" | "sinch" | "slack" | "telegram"
        | "telnyx" | "tiktok" | "twilio" | "twitch" | "vonage" | "webex" | "x" | "zoom"
        | "linkedin" => "messaging and social",
        "brevo" | "klaviyo" | "loops" | "mailchimp" | "mailgun" | "mandrill" | "postmark"
        | "resend" | "sendgrid" | "sparkpost" => "email",
        "airtable" | "asana" | "box" | "calcom" | "calendly" | "clickup" | "constant_contact"
        | "contentful" | "cronofy" | "docusign" | "dropbox" | "figma" | "fillout" | "framer"
        | "frameio" | "jira" | "jira_connect" | "linear" | "monday" | "msgraph" | "notion"
        | "sanity" | "tally" | "trello" | "typeform" | "webflow" | "zapier" => {
            "productivity and content"
        }
        "castle" | "clerk" | "kinde" | "okta" | "onfido" | "persona" | "stytch" | "vanta"
        | "workos" => "identity and security",
        "ashby" | "attio" | "checkr" | "clearbit" | "customerio" | "deel" | "finch"
        | "greenhouse" | "helpscout" | "hubspot" | "intercom" | "mixpanel" | "pipedrive"
        | "segment" | "zendesk" => "CRM, people and analytics",
        "autodesk" | "aws_sns" | "dub" | "incident_io" | "merge" | "nango" | "nylas"
        | "pagerduty" | "rutter" | "smartcar" => "platforms and integrations",
        "hmac" | "standard_webhooks" | "svix" => "generic schemes",
        _ => "other",
    }
}

/// Providers that give a failed delivery few or no further tries, so a sync route
/// loses their events while the handler is down: `(preset, what the provider does)`.
/// Queue routes store each event before the 200 and retry on their own schedule.
const RETRY_POORLY: &[(&str, &str)] = &[
    (
        "github",
        "GitHub does not redeliver a failed delivery by itself (only by hand, for 3 days)",
    ),
    (
        "gitlab",
        "GitLab does not retry a failed delivery, and disables a hook that keeps failing",
    ),
    (
        "slack",
        "Slack retries an event 3 times within minutes, then drops it",
    ),
    (
        "shopify",
        "Shopify retries for hours, then removes the subscription after repeated failures",
    ),
];

/// Why a queue route suits this provider, if it retries poorly.
pub fn retries_poorly(preset: &str) -> Option<&'static str> {
    RETRY_POORLY
        .iter()
        .find(|(name, _)| *name == preset)
        .map(|(_, why)| *why)
}
