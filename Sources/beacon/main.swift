print("beacon")
