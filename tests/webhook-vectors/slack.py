"""Signs the Slack fixtures with Slack's own SDK (slack_sdk.signature.SignatureVerifier) and adds
them to ../../fixtures/signatures/source_vectors.json. Run after vectors.mjs (pip install
slack-sdk==3.47.0)."""
import json
import pathlib
import time

from slack_sdk.signature import SignatureVerifier

root = pathlib.Path(__file__).resolve().parents[2] / "fixtures"
out = root / "signatures" / "source_vectors.json"
vectors = [v for v in json.loads(out.read_text()) if v["preset"] != "slack"] if out.exists() else []
secret = "8f742231b10e8888abcd99yyyzzz85a5"
now = int(time.time())
verifier = SignatureVerifier(signing_secret=secret)
for name in ["slack/app_mention.json", "slack/url_verification.json"]:
    body = (root / name).read_text()
    signature = verifier.generate_signature(timestamp=str(now), body=body)
    assert verifier.is_valid(body=body, timestamp=str(now), signature=signature)
    vectors.append({"preset": "slack", "library": "slack-sdk==3.47.0", "secret": secret, "file": name, "now": now,
                    "headers": {"X-Slack-Signature": signature, "X-Slack-Request-Timestamp": str(now)}})
out.write_text(json.dumps(vectors, indent=2) + "\n")
print(f"{len(vectors)} vectors")
