from rest_framework import serializers


class BrokerReachabilitySerializer(serializers.Serializer):
    bootstrap = serializers.CharField()
    status = serializers.ChoiceField(choices=["reachable", "unreachable"])


class HealthSerializer(serializers.Serializer):
    status = serializers.CharField()
    broker = BrokerReachabilitySerializer()
