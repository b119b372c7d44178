"""The merge template's sign-in: a Cognito user pool with a hosted domain, the console's
app client (authorization code with PKCE, no secret) and the groups of one tenant, or,
with `OidcIssuer` set, another OpenID Connect issuer instead (then none of the pool).

The functions find the app client's id by its name (`QUOTA_OIDC_COGNITO_CLIENT_NAME`):
the client names the API in its callback URL and the API names the functions, so giving
them its id would be a dependency cycle.
"""

from __future__ import annotations

from typing import Any

Template = dict[str, Any]

USE_COGNITO = "UseCognito"
HAS_PUBLIC_URL = "HasPublicUrl"
USER_POOL = "SignInUserPool"
USER_POOL_DOMAIN = "SignInUserPoolDomain"
USER_POOL_CLIENT = "SignInConsoleClient"
CLIENT_NAME = "mcp-quota-console"
ROLES = ("viewer", "operator", "admin")
COGNITO_ISSUER = "https://cognito-idp.${AWS::Region}.amazonaws.com/${" + USER_POOL + "}"


def parameters() -> Template:
    """The stack's sign-in parameters."""
    return {
        "SignInTenant": {
            "Type": "String",
            "Default": "default",
            "AllowedPattern": r"^[a-z0-9][a-z0-9-]{0,62}$",
            "Description": (
                "The tenant whose groups the user pool is created with "
                "(mcp-quota:<tenant>:viewer, :operator, :admin); add groups for others."
            ),
        },
        "OidcIssuer": {
            "Type": "String",
            "Default": "",
            "AllowedPattern": r"^(https://[^\s]+)?$",
            "Description": (
                "Another OpenID Connect issuer's URL instead of the stack's Cognito user "
                "pool (then no pool is created); empty: the user pool."
            ),
        },
        "OidcClientId": {
            "Type": "String",
            "Default": "",
            "Description": "The console's client id at OidcIssuer (the ID tokens' audience).",
        },
        "OidcGroupsClaim": {
            "Type": "String",
            "Default": "cognito:groups",
            "Description": "The claim of the mcp-quota:<tenant>:<role> groups in ID tokens.",
        },
    }


def conditions() -> Template:
    """Cognito unless another issuer is given; the console's URL from PublicUrl if set."""
    return {
        USE_COGNITO: {"Fn::Equals": [{"Ref": "OidcIssuer"}, ""]},
        HAS_PUBLIC_URL: {"Fn::Not": [{"Fn::Equals": [{"Ref": "PublicUrl"}, ""]}]},
    }


def resources(rest_api: str, api_stage: str, stage: str, roles: list[str]) -> Template:
    """The user pool, its domain, the console's client and the tenant's groups; and the
    grant to the functions' `roles` to find the client's id (all only with Cognito)."""
    console = {
        "Fn::If": [
            HAS_PUBLIC_URL,
            {"Fn::Sub": "${PublicUrl}/console"},
            {
                "Fn::Sub": f"https://${{{rest_api}}}.execute-api.${{AWS::Region}}."
                f"${{AWS::URLSuffix}}/{api_stage}/console"
            },
        ]
    }
    found: Template = {
        USER_POOL: {
            "Type": "AWS::Cognito::UserPool",
            "Condition": USE_COGNITO,
            # The people who may sign in, and their groups: kept like the tables.
            "DeletionPolicy": "Retain",
            "UpdateReplacePolicy": "Retain",
            "Properties": {
                "UserPoolName": {"Fn::Sub": "${AWS::StackName}-people"},
                # Administrators add people; nobody signs themself up.
                "AdminCreateUserConfig": {"AllowAdminCreateUserOnly": True},
                "UsernameAttributes": ["email"],
                "AutoVerifiedAttributes": ["email"],
                # Required: with OPTIONAL the hosted page never offers to set it up.
                "MfaConfiguration": "ON",
                "EnabledMfas": ["SOFTWARE_TOKEN_MFA"],
                "DeletionProtection": "ACTIVE",
                "Policies": {
                    "PasswordPolicy": {
                        "MinimumLength": 14,
                        "RequireLowercase": True,
                        "RequireUppercase": True,
                        "RequireNumbers": True,
                        "RequireSymbols": True,
                        "TemporaryPasswordValidityDays": 3,
                    }
                },
            },
        },
        USER_POOL_DOMAIN: {
            "Type": "AWS::Cognito::UserPoolDomain",
            "Condition": USE_COGNITO,
            "Properties": {
                "UserPoolId": {"Ref": USER_POOL},
                "Domain": {"Fn::Sub": f"mcp-quota-{stage}-${{AWS::AccountId}}"},
            },
        },
        USER_POOL_CLIENT: {
            "Type": "AWS::Cognito::UserPoolClient",
            "Condition": USE_COGNITO,
            "Properties": {
                "UserPoolId": {"Ref": USER_POOL},
                "ClientName": CLIENT_NAME,
                "GenerateSecret": False,  # a browser's public client: PKCE, no secret
                "AllowedOAuthFlowsUserPoolClient": True,
                "AllowedOAuthFlows": ["code"],
                "AllowedOAuthScopes": ["openid", "email", "profile"],
                "SupportedIdentityProviders": ["COGNITO"],
                "CallbackURLs": [console],
                "LogoutURLs": [console],
                "ExplicitAuthFlows": ["ALLOW_REFRESH_TOKEN_AUTH"],
                "PreventUserExistenceErrors": "ENABLED",
                "EnableTokenRevocation": True,
                "IdTokenValidity": 60,
                "AccessTokenValidity": 60,
                "RefreshTokenValidity": 12,
                "TokenValidityUnits": {
                    "IdToken": "minutes",
                    "AccessToken": "minutes",
                    "RefreshToken": "hours",
                },
            },
        },
        "SignInFindClient": {
            "Type": "AWS::IAM::Policy",
            "Condition": USE_COGNITO,
            "Properties": {
                "PolicyName": "find-sign-in-client",
                "Roles": [{"Ref": role} for role in roles],
                "PolicyDocument": {
                    "Version": "2012-10-17",
                    "Statement": [
                        {
                            "Sid": "ListOwnUserPoolClients",
                            "Effect": "Allow",
                            "Action": ["cognito-idp:ListUserPoolClients"],
                            "Resource": [{"Fn::GetAtt": [USER_POOL, "Arn"]}],
                        }
                    ],
                },
            },
        },
    }
    for role in ROLES:
        found[f"SignInGroup{role.capitalize()}"] = {
            "Type": "AWS::Cognito::UserPoolGroup",
            "Condition": USE_COGNITO,
            "Properties": {
                "UserPoolId": {"Ref": USER_POOL},
                "GroupName": {"Fn::Sub": f"mcp-quota:${{SignInTenant}}:{role}"},
                "Description": f"mcp-quota {role}s of the tenant",
            },
        }
    return found


def variables() -> Template:
    """The functions' sign-in settings (chalicelib/settings.py)."""
    return {
        "QUOTA_OIDC_ISSUER": {
            "Fn::If": [USE_COGNITO, {"Fn::Sub": COGNITO_ISSUER}, {"Ref": "OidcIssuer"}]
        },
        "QUOTA_OIDC_CLIENT_ID": {"Fn::If": [USE_COGNITO, "", {"Ref": "OidcClientId"}]},
        "QUOTA_OIDC_COGNITO_CLIENT_NAME": {"Fn::If": [USE_COGNITO, CLIENT_NAME, ""]},
        "QUOTA_OIDC_GROUPS_CLAIM": {"Ref": "OidcGroupsClaim"},
    }


def outputs() -> Template:
    """Where administrators add people and groups, and where people sign in."""
    return {
        "SignInUserPoolId": {"Condition": USE_COGNITO, "Value": {"Ref": USER_POOL}},
        "SignInDomain": {
            "Condition": USE_COGNITO,
            "Value": {
                "Fn::Sub": f"https://${{{USER_POOL_DOMAIN}}}.auth.${{AWS::Region}}.amazoncognito.com"
            },
        },
    }
