"""The rendered template's sign-in: a Cognito user pool nobody signs up to, the console's
public client (authorization code, PKCE, no secret) calling back to the console, the
tenant's three groups; or, with OidcIssuer set, none of them and that issuer instead."""

from __future__ import annotations

from tests.deploy.conftest import Packaged


def test_the_console_client_is_public_code_flow_back_to_the_console(packaged: Packaged) -> None:
    client = packaged.resources["SignInConsoleClient"]
    props = client["Properties"]

    assert client["Condition"] == "UseCognito"
    assert props["GenerateSecret"] is False
    assert props["AllowedOAuthFlows"] == ["code"]
    assert props["AllowedOAuthFlowsUserPoolClient"] is True
    assert "openid" in props["AllowedOAuthScopes"]
    [callback] = props["CallbackURLs"]
    condition, custom, own = callback["Fn::If"]
    assert condition == "HasPublicUrl"
    assert custom == {"Fn::Sub": "${PublicUrl}/console"}
    assert own["Fn::Sub"].startswith("https://${RestAPI}.execute-api.")
    assert own["Fn::Sub"].endswith("/console")


def test_nobody_signs_themself_up_and_the_pool_is_kept(packaged: Packaged) -> None:
    pool = packaged.resources["SignInUserPool"]

    assert pool["Properties"]["AdminCreateUserConfig"] == {"AllowAdminCreateUserOnly": True}
    assert pool["DeletionPolicy"] == pool["UpdateReplacePolicy"] == "Retain"
    assert pool["Properties"]["DeletionProtection"] == "ACTIVE"


def test_the_tenant_has_a_group_per_role(packaged: Packaged) -> None:
    groups = {
        r["Properties"]["GroupName"]["Fn::Sub"]
        for r in packaged.resources.values()
        if r["Type"] == "AWS::Cognito::UserPoolGroup"
    }
    assert groups == {
        f"mcp-quota:${{SignInTenant}}:{role}" for role in ("viewer", "operator", "admin")
    }


def test_another_issuer_replaces_the_pool(packaged: Packaged) -> None:
    template = packaged.template
    assert template["Conditions"]["UseCognito"] == {"Fn::Equals": [{"Ref": "OidcIssuer"}, ""]}
    cognito = {n for n, r in packaged.resources.items() if r["Type"].startswith("AWS::Cognito::")}
    assert all(packaged.resources[n]["Condition"] == "UseCognito" for n in cognito)
    variables = template["Globals"]["Function"]["Environment"]["Variables"]
    issuer = variables["QUOTA_OIDC_ISSUER"]["Fn::If"]
    assert issuer[0] == "UseCognito" and issuer[2] == {"Ref": "OidcIssuer"}
    assert variables["QUOTA_OIDC_CLIENT_ID"]["Fn::If"][2] == {"Ref": "OidcClientId"}


def test_every_person_signing_in_has_a_second_factor(packaged: Packaged) -> None:
    """Defect class: a security setting that is on paper only. With MFA `OPTIONAL` the
    hosted sign-in page never offers to set up an authenticator, and the console's client
    cannot (its scopes lack aws.cognito.signin.user.admin): nobody would have a second
    factor, for people who can mint admin tokens."""
    props = packaged.resources["SignInUserPool"]["Properties"]
    client = packaged.resources["SignInConsoleClient"]["Properties"]

    assert props["MfaConfiguration"] == "ON"
    # TOTP only: SMS would need an SNS role and costs per message.
    assert props["EnabledMfas"] == ["SOFTWARE_TOKEN_MFA"]
    assert "aws.cognito.signin.user.admin" not in client["AllowedOAuthScopes"]
    policy = props["Policies"]["PasswordPolicy"]
    assert policy["MinimumLength"] >= 14
