"""/api/v1/topics/: what kafka-topics, kafka-configs --entity-type topics and a console
consumer/producer do, through the Admin protocol, Fetch and Produce."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import serializers, status
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from api import audit, kafka
from api.disk_usage import disk_usage
from api.serializers.topics import (
    ConfigAlterSerializer,
    ConfigEntrySerializer,
    PartitionsCreateSerializer,
    RecordMetadataSerializer,
    RecordProduceSerializer,
    RecordQuerySerializer,
    RecordSerializer,
    TopicCreateSerializer,
    TopicDescriptionSerializer,
    TopicListingSerializer,
)
from api.views.base import (
    BrokerViewSet,
    alter_resource_configs,
    query_flag,
    resource_configs,
    search,
)
from broker.client import PartitionReader, Producer
from broker.client.models import ConfigResourceType, NewTopic, TopicDescription


def describe_topic(name: str) -> TopicDescription:
    return kafka.call(lambda admin: admin.describe_topics([name]))[0]


class TopicViewSet(BrokerViewSet):
    """Topics of the cluster: list, create, describe with partition offsets, delete; configs,
    partitions and records of one topic."""

    lookup_field = "name"
    # The names a topic can have (dots included); anything else is no topic's URL.
    lookup_value_regex = "[a-zA-Z0-9._-]{1,249}"
    serializer_class = TopicDescriptionSerializer

    def get_serializer_context(self) -> dict:
        context = super().get_serializer_context()
        if self.action in ("list", "retrieve"):
            context["disk"] = disk_usage()
        return context

    def get_serializer_class(self) -> type[serializers.Serializer]:
        return {
            "list": TopicListingSerializer,
            "create": TopicCreateSerializer,
            "configs": ConfigEntrySerializer,
            "alter_configs": ConfigAlterSerializer,
            "partitions": PartitionsCreateSerializer,
            "records": RecordSerializer,
            "produce": RecordProduceSerializer,
        }.get(self.action, TopicDescriptionSerializer)

    @extend_schema(
        parameters=[
            OpenApiParameter("search", str, description="Part of the topic name."),
            OpenApiParameter("internal", bool, description="Include internal topics."),
        ],
        responses=TopicListingSerializer(many=True),
    )
    def list(self, request: Request) -> Response:
        internal = query_flag(request, "internal", default=False)
        topics = kafka.call(lambda admin: admin.list_topics(include_internal=internal))
        topics = search(topics, request.query_params.get("search"), lambda t: t.name)
        return self.paginated(request, topics, TopicListingSerializer)

    @extend_schema(request=TopicCreateSerializer, responses={201: TopicDescriptionSerializer})
    def create(self, request: Request) -> Response:
        serializer = TopicCreateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        new = NewTopic(
            data["name"], data["partitions"], data["replication_factor"], data["configs"]
        )
        audit.note(
            request,
            resource=f"topic/{new.name}",
            partitions=new.num_partitions,
            replication_factor=new.replication_factor,
            configs=new.configs,
        )
        kafka.call(lambda admin: admin.create_topics([new]))
        described = describe_topic(new.name)
        return Response(
            TopicDescriptionSerializer(described, context=self.get_serializer_context()).data,
            status=status.HTTP_201_CREATED,
        )

    def retrieve(self, request: Request, name: str) -> Response:
        described = describe_topic(name)
        context = self.get_serializer_context()
        return Response(TopicDescriptionSerializer(described, context=context).data)

    @extend_schema(responses={204: None})
    def destroy(self, request: Request, name: str) -> Response:
        audit.note(request, resource=f"topic/{name}")
        kafka.call(lambda admin: admin.delete_topics([name]))
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(responses=ConfigEntrySerializer(many=True))
    @action(detail=True, methods=["get"])
    def configs(self, request: Request, name: str) -> Response:
        return Response(
            ConfigEntrySerializer(resource_configs(ConfigResourceType.TOPIC, name), many=True).data
        )

    @extend_schema(request=ConfigAlterSerializer, responses=ConfigEntrySerializer(many=True))
    @configs.mapping.patch
    def alter_configs(self, request: Request, name: str) -> Response:
        configs = alter_resource_configs(request, ConfigResourceType.TOPIC, name)
        return Response(ConfigEntrySerializer(configs, many=True).data)

    @extend_schema(request=PartitionsCreateSerializer, responses=TopicDescriptionSerializer)
    @action(detail=True, methods=["post"])
    def partitions(self, request: Request, name: str) -> Response:
        """Grow the topic to `count` partitions in total (CreatePartitions)."""
        serializer = PartitionsCreateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        count = serializer.validated_data["count"]
        audit.note(request, resource=f"topic/{name}", count=count)
        kafka.call(lambda admin: admin.create_partitions({name: count}))
        return Response(TopicDescriptionSerializer(describe_topic(name)).data)

    @extend_schema(
        parameters=[RecordQuerySerializer],
        responses=inline_serializer(
            "RecordPage",
            {
                "topic": serializers.CharField(),
                "partition": serializers.IntegerField(),
                "isolation": serializers.CharField(),
                "next_offset": serializers.IntegerField(allow_null=True),
                "records": RecordSerializer(many=True),
            },
        ),
    )
    @action(detail=True, methods=["get"], pagination_class=None)
    def records(self, request: Request, name: str) -> Response:
        """Records of one partition from an offset, the first record at or after a timestamp,
        or the log start; `next_offset` continues where the page ends."""
        query = RecordQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        data = query.validated_data
        start = query.start()
        records = kafka.call(
            lambda reader: reader.read(
                name,
                data["partition"],
                max_records=data["limit"],
                isolation_level=data["isolation"],
                **start,
            ),
            PartitionReader,
        )
        return Response(
            {
                "topic": name,
                "partition": data["partition"],
                "isolation": data["isolation"],
                "next_offset": records[-1].offset + 1 if records else None,
                "records": RecordSerializer(records, many=True).data,
            }
        )

    @extend_schema(
        request=RecordProduceSerializer,
        responses={201: RecordMetadataSerializer},
    )
    @records.mapping.post
    def produce(self, request: Request, name: str) -> Response:
        """Write a test record (acks=all)."""
        serializer = RecordProduceSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        kwargs = serializer.send_kwargs()
        audit.note(request, resource=f"topic/{name}", partition=kwargs["partition"])
        metadata = kafka.call(lambda producer: producer.send_and_wait(name, **kwargs), Producer)
        return Response(RecordMetadataSerializer(metadata).data, status=status.HTTP_201_CREATED)
