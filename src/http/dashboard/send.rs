//! Send an event (`/send`): a form with the event name, a JSON payload editor and an optional
//! delay (`30s`, `1h30m`), checked as `POST /trigger` checks them. A mistake answers the form
//! again (400) with the user's text kept and what is wrong; a sent event is shown (its page).
//! The event's source is `http`, as `/trigger`'s. The form posts through the same guard as every
//! dashboard action ([`crate::http::guard::same_origin`]).

use std::collections::HashMap;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use axum::Form;
use maud::html;
use serde_json::Value;

use super::page::{self, layout_with_status, PageError};
use crate::client::SendEvent;
use crate::http::AppState;
use crate::model::{Delay, Source};

/// What the form holds, as the user left it.
#[derive(Default)]
struct Draft {
    name: String,
    payload: String,
    delay: String,
}

fn form(state: &AppState, status: StatusCode, draft: &Draft, error: Option<&str>) -> Response {
    let body = html! {
        h1 { "Send an event" }
        @if let Some(e) = error {
            p.error-text #send-error role="alert" { (e) }
        }
        form.send method="post" action="/send" {
            label { "Name " input #send-name name="name" required value=(draft.name) placeholder="user.created"; }
            label { "Payload (JSON) "
                textarea #send-payload name="payload" rows="10" spellcheck="false" { (draft.payload) }
            }
            label { "Delay (optional) " input #send-delay name="delay" value=(draft.delay) placeholder="30s, 5m or 1h30m"; }
            button #send-submit type="submit" { "Send" }
        }
    };
    layout_with_status(state, status, "Send an event", "/send", body)
}

/// `GET /send`: the empty form.
pub async fn page(State(state): State<AppState>) -> Response {
    let draft = Draft {
        payload: "{}".into(),
        ..Draft::default()
    };
    form(&state, StatusCode::OK, &draft, None)
}

/// `POST /send` (form: `name`, `payload`, `delay`): sends the event and shows it, or answers the
/// form again with the mistake.
pub async fn send(
    State(state): State<AppState>,
    Form(fields): Form<HashMap<String, String>>,
) -> Result<Response, PageError> {
    let draft = Draft {
        name: fields.get("name").cloned().unwrap_or_default(),
        payload: fields.get("payload").cloned().unwrap_or_default(),
        delay: fields.get("delay").cloned().unwrap_or_default(),
    };
    let refuse = |why: String| Ok(form(&state, StatusCode::BAD_REQUEST, &draft, Some(&why)));
    let name = draft.name.trim();
    if name.is_empty() {
        return refuse("The event needs a name, such as user.created; nothing was sent.".into());
    }
    let payload: Value = match draft.payload.trim() {
        "" => Value::Object(serde_json::Map::new()),
        text => match serde_json::from_str(text) {
            Ok(v) => v,
            Err(e) => {
                return refuse(format!(
                    "The payload is not valid JSON: {e}; nothing was sent."
                ))
            }
        },
    };
    let mut event = SendEvent::new(name, &payload);
    match draft.delay.trim() {
        "" => {}
        text => match Delay::parse(text) {
            Ok(delay) => event = event.delay(delay),
            Err(e) => return refuse(format!("The delay is not valid: {e}; nothing was sent.")),
        },
    }
    match state.client.send_inserted(event, Source::Http).await {
        Ok(sent) => Ok(Redirect::to(&page::event_href(&sent.event.id)).into_response()),
        Err(
            e @ (crate::client::Error::InvalidEventName(_)
            | crate::client::Error::InvalidDelay(_)
            | crate::client::Error::InvalidId(_)),
        ) => refuse(format!("{e}; nothing was sent.")),
        Err(e) => Err(crate::http::ApiError::from(e).into()),
    }
}
