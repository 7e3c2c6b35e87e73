"""SCRAM users (DescribeUserScramCredentials, AlterUserScramCredentials). Credentials are
security data: reading them needs the admin role too."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiParameter, extend_schema
from kio.schema.errors import ErrorCode
from rest_framework import status
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response

from api import audit, kafka
from api.permissions import ADMIN
from api.serializers.errors import errors
from api.serializers.users import (
    ScramDeleteQuerySerializer,
    ScramUpsertSerializer,
    ScramUserSerializer,
)
from api.views.base import BrokerViewSet, search
from broker.client import KafkaAdminError

USER_NAME_PATTERN = r"[^/\x00-\x1f\x7f]+"


def users_data(credentials: dict) -> list[dict]:
    return [
        {"name": name, "credentials": infos} for name, infos in sorted(credentials.items()) if infos
    ]


class ScramUserViewSet(BrokerViewSet):
    """Users with SCRAM credentials, by mechanism and iteration count."""

    serializer_class = ScramUserSerializer
    lookup_field = "name"
    lookup_value_regex = USER_NAME_PATTERN
    read_role = ADMIN
    write_role = ADMIN

    @extend_schema(
        parameters=[OpenApiParameter("search", str, description="Part of the name")],
        responses={200: ScramUserSerializer(many=True), **errors()},
    )
    def list(self, request: Request) -> Response:
        credentials = kafka.call(lambda admin: admin.describe_user_scram_credentials())
        term = request.query_params.get("search", "")[:1000]
        return self.paginated(request, search(users_data(credentials), term, lambda u: u["name"]))

    @extend_schema(responses={200: ScramUserSerializer, **errors(404)})
    def retrieve(self, request: Request, name: str) -> Response:
        """RESOURCE_NOT_FOUND (404) for a user without credentials."""
        credentials = kafka.call(lambda admin: admin.describe_user_scram_credentials([name]))
        return Response(ScramUserSerializer({"name": name, "credentials": credentials[name]}).data)

    @extend_schema(
        request=ScramUpsertSerializer, responses={201: ScramUpsertSerializer, **errors()}
    )
    def create(self, request: Request) -> Response:
        """Create or replace the user's credential for the mechanism (an upsert, as
        kafka-configs --alter --add-config does)."""
        serializer = ScramUpsertSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        d = serializer.validated_data
        audit.note(
            request,
            resource=f"user/{d['name']}",
            mechanism=d["mechanism"],
            iterations=d["iterations"],
        )
        kafka.call(
            lambda admin: admin.upsert_user_scram_credential(
                d["name"], d["password"], d["mechanism"], d["iterations"]
            )
        )
        return Response(serializer.data, status=status.HTTP_201_CREATED)

    @extend_schema(parameters=[ScramDeleteQuerySerializer], responses={204: None, **errors(404)})
    def destroy(self, request: Request, name: str) -> Response:
        """Delete the user's credential for the mechanism, or all of them; RESOURCE_NOT_FOUND
        (404) when there is none."""
        if request.query_params.get("mechanism") == "":
            # A form's empty field would otherwise read as "every mechanism".
            raise ValidationError({"mechanism": ["Name a mechanism, or leave the parameter out."]})
        query = ScramDeleteQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        mechanism = query.validated_data.get("mechanism")
        audit.note(request, resource=f"user/{name}", mechanism=mechanism or "all")
        kafka.call(lambda admin: delete_credentials(admin, name, mechanism))
        return Response(status=status.HTTP_204_NO_CONTENT)


async def delete_credentials(admin, name: str, mechanism: str | None) -> None:
    if mechanism is not None:
        await admin.delete_user_scram_credential(name, mechanism)
        return
    credentials = await admin.describe_user_scram_credentials([name])
    if not credentials.get(name):
        raise KafkaAdminError.from_code(
            ErrorCode.resource_not_found, f"User {name} has no SCRAM credential.", name
        )
    for info in credentials[name]:
        await admin.delete_user_scram_credential(name, info.mechanism)
